"""The budget ledger: a run reserves its maximum cost before its first model call and settles its
real cost at the end, each in one ``BEGIN IMMEDIATE`` transaction shared by every process.

``budget_totals`` keeps, per scope (the fleet, a provider, a job) and period (a UTC day, a UTC
month), the settled spend and the open reservations, so a reservation reads and writes a few
rows whatever the history. Amounts are integer micro-dollars. A reservation is checked against
every cap that applies: settled + open + the new amount may not pass it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from runner.clock import iso, utcnow
from runner.errors import StoreError
from runner.events import Event
from runner.store import Store

MICRO = 1_000_000


class Scope(StrEnum):
    FLEET = "fleet"
    PROVIDER = "provider"
    JOB = "job"


class Period(StrEnum):
    DAY = "day"
    MONTH = "month"


class BudgetUnavailable(StoreError):
    """The reservation could not be written: the run fails before any model call (exit 1)."""

    reason = "budgetunavailable"


def to_micro(usd: float) -> int:
    return round(usd * MICRO)


def to_usd(micro: int) -> float:
    return round(micro / MICRO, 6)


def periods(now: datetime) -> dict[Period, str]:
    utc = now.astimezone(UTC)
    return {Period.DAY: utc.strftime("%Y-%m-%d"), Period.MONTH: utc.strftime("%Y-%m")}


@dataclass(frozen=True)
class Cap:
    scope: Scope
    name: str  # '' for the fleet
    period: Period
    limit_micro: int

    def label(self) -> str:
        who = "fleet" if self.scope == Scope.FLEET else f"{self.scope} {self.name}"
        return f"{who} {'daily' if self.period == Period.DAY else 'monthly'} cap ${to_usd(self.limit_micro):.2f}"


@dataclass(frozen=True)
class Hold:
    """What a run asks to reserve, and the caps that apply to it."""

    run_id: str
    job: str
    providers: tuple[str, ...]  # the first is the one its cost is counted under, unless a fallback answered
    amount_micro: int
    caps: tuple[Cap, ...]

    def scopes(self) -> list[tuple[Scope, str]]:
        return [(Scope.FLEET, ""), (Scope.JOB, self.job), *((Scope.PROVIDER, p) for p in self.providers)]


@dataclass(frozen=True)
class Refusal:
    """The reservation would pass ``cap``: nothing was written."""

    cap: Cap
    settled_micro: int
    open_micro: int
    amount_micro: int

    def describe(self) -> str:
        return (
            f"the {self.cap.label()} would be passed: spent ${to_usd(self.settled_micro):.2f}, reserved by runs "
            f"in progress ${to_usd(self.open_micro):.2f}, this run reserves ${to_usd(self.amount_micro):.2f}"
        )


def reserve(store: Store, hold: Hold, *, now: datetime | None = None) -> Refusal | None:
    """Reserve ``hold`` (None) or refuse it (a ``Refusal``, nothing written), in one transaction.
    A reservation that cannot be written raises ``BudgetUnavailable``."""
    when = periods(now or utcnow())
    try:
        with store.transaction() as conn:
            refusal = _check(conn, hold, when)
            if refusal is not None:
                return refusal
            _insert(conn, hold, when, now or utcnow())
    except StoreError as exc:
        raise BudgetUnavailable(f"cannot write the run's budget reservation: {exc}") from exc
    except sqlite3.Error as exc:
        raise BudgetUnavailable(f"cannot write the run's budget reservation: {exc}") from exc
    return None


def _check(conn: sqlite3.Connection, hold: Hold, when: dict[Period, str]) -> Refusal | None:
    for cap in hold.caps:
        row = conn.execute(
            "SELECT settled_micro, open_micro FROM budget_totals WHERE scope=? AND name=? AND period=?",
            (cap.scope, cap.name, when[cap.period]),
        ).fetchone()
        settled, open_ = (int(row[0]), int(row[1])) if row else (0, 0)
        if settled + open_ + hold.amount_micro > cap.limit_micro:
            return Refusal(cap, settled, open_, hold.amount_micro)
    return None


def _insert(conn: sqlite3.Connection, hold: Hold, when: dict[Period, str], now: datetime) -> None:
    conn.execute(
        "INSERT INTO budget_runs (run_id, job, providers, provider, day, month, reserved_micro, state, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, 'open', ?)",
        (
            hold.run_id,
            hold.job,
            json.dumps(list(hold.providers)),
            hold.providers[0] if hold.providers else "",
            when[Period.DAY],
            when[Period.MONTH],
            hold.amount_micro,
            iso(now),
        ),
    )
    if hold.amount_micro:
        _add(conn, hold.scopes(), when.values(), open_micro=hold.amount_micro)


def _add(
    conn: sqlite3.Connection,
    scopes: Iterable[tuple[Scope, str]],
    keys: Iterable[str],
    *,
    open_micro: int = 0,
    settled_micro: int = 0,
) -> None:
    rows = [(scope, name, period, settled_micro, open_micro) for scope, name in scopes for period in keys]
    conn.executemany(
        "INSERT INTO budget_totals (scope, name, period, settled_micro, open_micro) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT(scope, name, period) DO UPDATE SET settled_micro = budget_totals.settled_micro + excluded.settled_micro, "
        "open_micro = budget_totals.open_micro + excluded.open_micro",
        rows,
    )


def settle(store: Store, run_id: str, *, now: datetime | None = None) -> bool:
    """Release run ``run_id``'s open reservation and count its real cost (the run row's
    ``cost_usd``, else the costs its events recorded); False when it had none open.
    Joins the caller's transaction (``ledger.finish``, the recovery of lost runs)."""
    with store.transaction() as conn:
        row = conn.execute(
            "SELECT job, providers, provider, day, month, reserved_micro FROM budget_runs "
            "WHERE run_id=? AND state='open'",
            (run_id,),
        ).fetchone()
        if row is None:
            return False
        split = _real_cost(conn, run_id, _answering(conn, run_id, row["provider"]))
        cost = sum(split.values())
        conn.execute(
            "UPDATE budget_runs SET state='settled', cost_micro=?, provider=?, settled_at=? WHERE run_id=?",
            (cost, next(iter(split)), iso(now or utcnow()), run_id),
        )
        keys = (row["day"], row["month"])
        held = [(Scope.FLEET, ""), (Scope.JOB, row["job"])]
        held += [(Scope.PROVIDER, p) for p in json.loads(row["providers"])]
        if row["reserved_micro"]:
            _add(conn, held, keys, open_micro=-int(row["reserved_micro"]))
        _add(conn, held[:2], keys, settled_micro=cost)
        for provider, micro in split.items():
            _add(conn, [(Scope.PROVIDER, provider)], keys, settled_micro=micro)
    return True


SIDE_CALLS = (Event.SUMMARY, Event.SKILL_REVIEW, Event.APPROVAL_JUDGED)  # priced calls beside the model turns


def _answering(conn: sqlite3.Connection, run_id: str, first: str) -> str:
    """The provider that answered last: the target of the run's last ``provider_fallback``, else the first."""
    row = conn.execute(
        "SELECT json_extract(payload, '$.to') FROM run_events WHERE run_id=? AND kind=? ORDER BY seq DESC LIMIT 1",
        (run_id, Event.PROVIDER_FALLBACK),
    ).fetchone()
    return str(row[0]) if row and row[0] else first


def _real_cost(conn: sqlite3.Connection, run_id: str, main: str) -> dict[str, int]:
    """The run's real cost split by provider (the main one first): the run row's ``cost_usd``, or what
    its ``response``, ``summary``, ``skill_review`` and ``approval_judged`` events recorded when it ended
    before writing it (a lost run, a model error mid-loop), whichever is more. Side calls another
    provider (the auxiliary model) answered are counted under it, the rest under ``main``."""
    row = conn.execute("SELECT cost_usd FROM runs WHERE id=?", (run_id,)).fetchone()
    kinds = ", ".join("?" * (1 + len(SIDE_CALLS)))
    ev = conn.execute(
        "SELECT SUM(CAST(json_extract(payload, '$.cost_usd') AS DOUBLE PRECISION)) FROM run_events "
        f"WHERE run_id=? AND kind IN ({kinds})",
        (run_id, Event.RESPONSE, *SIDE_CALLS),
    ).fetchone()
    total = max(float(row[0] or 0.0) if row is not None else 0.0, float(ev[0] or 0.0))
    others = conn.execute(
        "SELECT json_extract(payload, '$.provider') AS p, SUM(CAST(json_extract(payload, '$.cost_usd') AS DOUBLE PRECISION)) AS c "
        f"FROM run_events WHERE run_id=? AND kind IN ({', '.join('?' * len(SIDE_CALLS))}) GROUP BY p",
        (run_id, *SIDE_CALLS),
    ).fetchall()
    split = {main: to_micro(float(total))}
    for provider, cost in others:
        if provider and provider != main and cost:
            micro = to_micro(float(cost))
            split[str(provider)] = micro
            split[main] = max(0, split[main] - micro)
    return split


# -- reading ---------------------------------------------------------------------------------------
def totals(store: Store, *, now: datetime | None = None) -> list[dict[str, Any]]:
    """Today's and this month's rows of ``budget_totals`` (UTC), amounts in USD."""
    when = periods(now or utcnow())
    rows = store.query(
        "SELECT scope, name, period, settled_micro, open_micro FROM budget_totals WHERE period IN (?, ?) "
        "ORDER BY scope, name, period",
        (when[Period.DAY], when[Period.MONTH]),
    )
    return [
        {
            "scope": r["scope"],
            "name": r["name"],
            "period": Period.DAY if r["period"] == when[Period.DAY] else Period.MONTH,
            "spent_usd": to_usd(r["settled_micro"]),
            "reserved_usd": to_usd(r["open_micro"]),
        }
        for r in rows
    ]


def open_reservations(store: Store) -> list[dict[str, Any]]:
    rows = store.query(
        "SELECT run_id, job, providers, reserved_micro, created_at FROM budget_runs WHERE state='open' "
        "ORDER BY created_at"
    )
    return [
        {
            "run_id": r["run_id"],
            "job": r["job"],
            "providers": json.loads(r["providers"]),
            "reserved_usd": to_usd(r["reserved_micro"]),
            "created_at": r["created_at"],
        }
        for r in rows
    ]
