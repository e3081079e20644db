"""Fleet cost budgets: a reservation per run and running totals per scope and period.

Amounts are integer micro-dollars (1e-6 USD), so sums never drift.
"""

from __future__ import annotations

from typing import Any


def apply(db: Any) -> None:
    db["budget_runs"].create(
        {
            "run_id": str,
            "job": str,
            "providers": str,  # JSON list: the providers the run may spend on (caps it holds)
            "provider": str,  # the provider its real cost is counted under once settled
            "day": str,  # UTC day of the reservation, YYYY-MM-DD
            "month": str,  # UTC month, YYYY-MM
            "reserved_micro": int,
            "cost_micro": int,  # NULL while open
            "state": str,  # open | settled
            "created_at": str,
            "settled_at": str,
        },
        pk="run_id",
    )
    db.execute("CREATE INDEX budget_runs_open ON budget_runs (state) WHERE state = 'open'")
    db["budget_totals"].create(
        {
            "scope": str,  # fleet | provider | job
            "name": str,  # '' for the fleet, else the provider or job name
            "period": str,  # YYYY-MM-DD (a day) or YYYY-MM (a month)
            "settled_micro": int,
            "open_micro": int,
        },
        pk=("scope", "name", "period"),
        defaults={"settled_micro": 0, "open_micro": 0},
    )
