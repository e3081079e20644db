"""Read models over the runs and tasks tables for the CLI's listings, the dashboard's charts and
``/metrics``: aggregate reads only (a run's own rows are ``runs.py``'s, every write the ledger's).
Each text is the same on SQLite and PostgreSQL (``julianday`` is a function of runner's schema there)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from runner.statuses import RunStatus
from runner.store import Store

FAILURES = (RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.UNKNOWN)  # what the dashboard counts as failed


@dataclass(frozen=True)
class LastRun:
    status: RunStatus
    created_at: str
    delivery_failed: bool


def last_runs(store: Store) -> dict[str, LastRun]:
    """Each job's newest run."""
    return {
        r["job"]: LastRun(RunStatus(r["status"]), r["created_at"], bool(r["delivery_failed"]))
        for r in store.query(
            "SELECT job, status, created_at, delivery_failed FROM runs r WHERE created_at = "
            "(SELECT MAX(created_at) FROM runs WHERE job = r.job)"
        )
    }


@dataclass(frozen=True)
class DayTotals:
    day: str  # YYYY-MM-DD (UTC)
    job: str
    runs: int
    failed: int
    cost_usd: float
    tokens: int
    avg_duration_s: float


def daily_totals(store: Store, since: str) -> list[DayTotals]:
    """Per UTC day and job, from ``since`` (a date): top-level runs, failures, cost, tokens, mean duration."""
    rows = store.query(
        "SELECT substr(created_at, 1, 10) AS day, job, COUNT(*) AS runs, "
        f"SUM(CASE WHEN status IN ({','.join('?' * len(FAILURES))}) THEN 1 ELSE 0 END) AS failed, "
        "COALESCE(SUM(cost_usd), 0) AS cost, COALESCE(SUM(prompt_tokens + completion_tokens), 0) AS tokens, "
        "AVG((julianday(ended_at) - julianday(started_at)) * 86400.0) AS dur "
        "FROM runs WHERE created_at >= ? AND parent_run_id IS NULL GROUP BY day, job ORDER BY day, job",
        (*FAILURES, since),
    )
    return [
        DayTotals(r["day"], r["job"], r["runs"], r["failed"] or 0, r["cost"] or 0.0, r["tokens"] or 0, r["dur"] or 0.0)
        for r in rows
    ]


@dataclass(frozen=True)
class StatusTotals:
    job: str
    status: RunStatus
    runs: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float


def totals_by_status(store: Store) -> list[StatusTotals]:
    """Per job and status: top-level runs, their tokens and cost."""
    return [
        StatusTotals(r["job"], RunStatus(r["status"]), r["n"], r["p"], r["c"], r["usd"])
        for r in store.query(
            "SELECT job, status, COUNT(*) AS n, COALESCE(SUM(prompt_tokens), 0) AS p, "
            "COALESCE(SUM(completion_tokens), 0) AS c, COALESCE(SUM(cost_usd), 0) AS usd "
            "FROM runs WHERE parent_run_id IS NULL GROUP BY job, status"
        )
    ]


class Measure(Enum):
    """What a histogram counts, and over which runs."""

    DURATION = (
        "(julianday(ended_at) - julianday(started_at)) * 86400.0",
        "ended_at IS NOT NULL AND started_at IS NOT NULL AND parent_run_id IS NULL",
    )
    LATENESS = ("waited_s", "waited_s IS NOT NULL")  # how long a scheduled fire waited for a slot


@dataclass(frozen=True)
class Histogram:
    job: str
    cumulative: tuple[int, ...]  # runs at or below each bucket's bound
    count: int
    total: float


def histograms(store: Store, measure: Measure, buckets: tuple[float, ...]) -> list[Histogram]:
    """Per job: cumulative bucket counts, sum and count of ``measure``."""
    expr, where = measure.value
    # CASE, not SUM(v <= b), and a named subquery: the same text on SQLite and PostgreSQL
    cases = ", ".join(f"SUM(CASE WHEN v <= {b} THEN 1 ELSE 0 END) AS b{i}" for i, b in enumerate(buckets))
    rows = store.query(
        f"SELECT job, COUNT(*) AS n, COALESCE(SUM(v), 0) AS total, {cases} "
        f"FROM (SELECT job, {expr} AS v FROM runs WHERE {where}) AS finished GROUP BY job"
    )
    return [Histogram(r["job"], tuple(r[f"b{i}"] or 0 for i in range(len(buckets))), r["n"], r["total"]) for r in rows]


def queued_count(store: Store) -> int:
    row = store.one("SELECT COUNT(*) AS n FROM runs WHERE status = 'queued'")
    return int(row["n"]) if row else 0


def task_counts(store: Store) -> dict[str, int]:
    """Kanban tasks by status."""
    return {r["status"]: r["n"] for r in store.query("SELECT status, COUNT(*) AS n FROM tasks GROUP BY status")}
