"""PostgreSQL: the search index's removal triggers plan their statements once, not per row.

``search_event_removed`` (a row of ``run_events`` deleted) and ``search_run_removed`` (a run
deleted) run two statements per row, each naming the row's ``run_id``. PostgreSQL plans such a
statement for the value it is given for its first executions, and keeps doing so while that looks
cheaper than one plan for every value. A pruned run's id is the smallest in the index, below its
histogram, so each plan reads the index for the smallest live value, and walks over every entry
the prune has deleted since the last vacuum: 1,046 buffers and about 1 ms a row on a 1,000,000-run
ledger, 20 ms a run, a prune slowing to 21 runs a second. ``plan_cache_mode =
force_generic_plan`` on the two functions plans each statement once per session (an index lookup
by ``(run_id, seq)`` or ``run_id``, the plan any value takes): 477 runs a second on the same
ledger. Nothing to do on SQLite (its FTS5 triggers are not planned per value).
"""

from __future__ import annotations

from typing import Any

FUNCTIONS = ("search_event_removed", "search_run_removed")


def apply(db: Any) -> None:
    return None


def apply_postgresql(db: Any) -> None:
    for name in FUNCTIONS:
        db.execute(f"ALTER FUNCTION {name}() SET plan_cache_mode = force_generic_plan")
