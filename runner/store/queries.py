"""Read models for the CLI's listings and the dashboard (overview, jobs, runs in keyset pages, a
run's detail, approvals, charts) and ``/metrics``: reads only (a run's own rows are ``runs.py``'s,
every write the ledger's). Each text is the same on SQLite and PostgreSQL (``julianday`` is a
function of runner's schema there).

Run lists page by ``(created_at, id)``, newest first, with the last shown run's id as the cursor,
never ``OFFSET``; every filter of a listing (none, a job, a status) has an index in that order
(migration m0030), so page 1,000 of a million runs costs what page 1 costs, and a page stops
after its rows."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from runner.events import STEP_KINDS, Recorded
from runner.statuses import ACTIVE, ApprovalState, RunStatus
from runner.store import Store
from runner.store.runs import events

FAILURES = (RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.UNKNOWN)  # what the dashboard counts as failed


@dataclass(frozen=True)
class LastRun:
    status: RunStatus
    created_at: str
    delivery_failed: bool


def last_runs(store: Store) -> dict[str, LastRun]:
    """Each job's newest run: the jobs found by skipping through ``runs_job_recent`` (a seek per
    job, the PostgreSQL wiki's loose index scan), then each one's newest run by a seek, so a
    million runs cost what a hundred cost."""
    return {
        r["job"]: LastRun(RunStatus(r["status"]), r["created_at"], bool(r["delivery_failed"]))
        for r in store.query(
            "WITH RECURSIVE jobs(job) AS (SELECT MIN(job) FROM runs UNION ALL "
            "SELECT (SELECT MIN(job) FROM runs WHERE job > jobs.job) FROM jobs WHERE jobs.job IS NOT NULL) "
            "SELECT r.job, r.status, r.created_at, r.delivery_failed FROM jobs JOIN runs r ON r.id = "
            "(SELECT id FROM runs WHERE job = jobs.job ORDER BY created_at DESC, id DESC LIMIT 1)"
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
class DayStatus:
    day: str  # YYYY-MM-DD (UTC)
    status: RunStatus
    runs: int


def daily_statuses(store: Store, since: str) -> list[DayStatus]:
    """Top-level runs per UTC day and status, from ``since`` (a date): the runs-by-status chart."""
    rows = store.query(
        "SELECT substr(created_at, 1, 10) AS day, status, COUNT(*) AS n FROM runs "
        "WHERE created_at >= ? AND parent_run_id IS NULL GROUP BY day, status ORDER BY day, status",
        (since,),
    )
    return [DayStatus(r["day"], RunStatus(r["status"]), r["n"]) for r in rows]


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


@dataclass(frozen=True)
class Waiting:
    """A run parked on an approval request, with the request."""

    run_id: str
    job: str
    approval_id: str
    command: str
    expires_at: str


def waiting_runs(store: Store) -> list[Waiting]:
    """Runs ``waiting`` now, each with the pending request it waits for, oldest request first
    (serve's log line, the dashboard's overview, its run page's banner)."""
    rows = store.query(
        "SELECT r.id, r.job, a.id AS approval_id, a.command, a.expires_at FROM runs r "
        "JOIN approval_requests a ON a.run_id = r.id WHERE r.status=? AND a.status=? "
        "ORDER BY a.requested_at, a.id",
        (RunStatus.WAITING, ApprovalState.PENDING),
    )
    return [Waiting(r["id"], r["job"], r["approval_id"], r["command"], r["expires_at"]) for r in rows]


def waiting_count(store: Store) -> int:
    """Runs ``waiting`` on an approval now (the dashboard's badge, ``/metrics``)."""
    row = store.one("SELECT COUNT(*) AS n FROM runs WHERE status=?", (RunStatus.WAITING,))
    return int(row["n"]) if row else 0


def task_counts(store: Store) -> dict[str, int]:
    """Kanban tasks by status."""
    return {r["status"]: r["n"] for r in store.query("SELECT status, COUNT(*) AS n FROM tasks GROUP BY status")}


# -- the dashboard -------------------------------------------------------------------------------------
PAGE_SIZE = 50
STRIP_RUNS = 30
RUN_COLUMNS = (
    "id, job, trigger, status, reason, created_at, started_at, ended_at, iterations, prompt_tokens, "
    "completion_tokens, cost_usd, parent_run_id, delivery_failed, waited_s"
)
#: what run pages are ordered and cut by (``created_at`` is written when the row is: insertion
#: order), on both dialects: the indexes of m0030 hold runs in this order per job and status
PAGE_KEY = "(created_at, id)"
MAX_EVENTS = 5000  # of one run's timeline on its page; `runner runs show` has them all


@dataclass(frozen=True)
class RunFilter:
    job: str | None = None
    status: str | None = None
    since: str | None = None  # ISO date or time, on created_at
    until: str | None = None

    def where(self) -> tuple[list[str], list[Any]]:
        where: list[str] = []
        params: list[Any] = []
        for column, value, op in (
            ("job", self.job, "="),
            ("status", self.status, "="),
            ("created_at", self.since, ">="),
            ("created_at", self.until, "<"),
        ):
            if value:
                where.append(f"{column} {op} ?")
                params.append(value)
        return where, params

    def query(self) -> dict[str, str]:
        return {
            k: v
            for k, v in (("job", self.job), ("status", self.status), ("since", self.since), ("until", self.until))
            if v
        }


@dataclass(frozen=True)
class RunsPage:
    rows: list[dict[str, Any]]
    older: str | None  # cursor: the run id to pass as ``before``
    newer: str | None  # cursor: the run id to pass as ``after``


def runs_page(
    store: Store, flt: RunFilter, *, before: str | None = None, after: str | None = None, limit: int = PAGE_SIZE
) -> RunsPage:
    where, params = flt.where()
    order = "DESC"
    if before:
        where.append(f"{PAGE_KEY} < (SELECT {PAGE_KEY.strip('()')} FROM runs WHERE id = ?)")
        params.append(before)
    elif after:
        where.append(f"{PAGE_KEY} > (SELECT {PAGE_KEY.strip('()')} FROM runs WHERE id = ?)")
        params.append(after)
        order = "ASC"
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    by = ", ".join(f"{part} {order}" for part in PAGE_KEY.strip("()").split(", "))
    rows = store.query(f"SELECT {RUN_COLUMNS} FROM runs {clause} ORDER BY {by} LIMIT ?", (*params, limit + 1))
    more = len(rows) > limit
    rows = rows[:limit]
    if order == "ASC":
        rows.reverse()
        older = rows[-1]["id"] if rows else None
        newer = rows[0]["id"] if more and rows else None
    else:
        older = rows[-1]["id"] if more and rows else None
        newer = rows[0]["id"] if (before and rows) else None
    return RunsPage(rows=rows, older=older, newer=newer)


def duration_s(row: dict[str, Any]) -> float | None:
    if not row.get("started_at") or not row.get("ended_at"):
        return None
    return (datetime.fromisoformat(row["ended_at"]) - datetime.fromisoformat(row["started_at"])).total_seconds()


def active_runs(store: Store) -> list[dict[str, Any]]:
    marks = ",".join("?" * len(ACTIVE))
    return store.query(
        f"SELECT {RUN_COLUMNS} FROM runs WHERE status IN ({marks}) ORDER BY created_at DESC LIMIT 200", tuple(ACTIVE)
    )


def recent_failures(store: Store, now: datetime, hours: float = 24) -> list[dict[str, Any]]:
    marks = ",".join("?" * len(FAILURES))
    since = (now - timedelta(hours=hours)).isoformat()
    return store.query(
        f"SELECT {RUN_COLUMNS}, error FROM runs WHERE status IN ({marks}) AND created_at >= ? "
        "ORDER BY created_at DESC LIMIT 100",
        (*FAILURES, since),
    )


def strips(store: Store, jobs: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Each job's last 30 runs, oldest first (the colour strip)."""
    out = {}
    for job in jobs:
        rows = store.query(
            "SELECT id, status, created_at FROM runs WHERE job = ? ORDER BY created_at DESC LIMIT ?", (job, STRIP_RUNS)
        )
        out[job] = list(reversed(rows))
    return out


@dataclass(frozen=True)
class RunDetail:
    run: dict[str, Any]
    children: list[dict[str, Any]]
    events: list[Recorded]
    truncated: bool
    approvals: list[dict[str, Any]]
    task: dict[str, Any] | None


def run_detail(store: Store, run_id: str) -> RunDetail | None:
    run = store.one("SELECT * FROM runs WHERE id = ?", (run_id,))
    if run is None:
        return None
    kids = store.query(f"SELECT {RUN_COLUMNS} FROM runs WHERE parent_run_id = ? ORDER BY created_at, id", (run_id,))
    evs = events(store, run_id, 0, MAX_EVENTS + 1)
    approvals = store.query("SELECT * FROM approvals WHERE run_id = ? ORDER BY id", (run_id,))
    task = None
    if run.get("task_id"):
        task = store.one("SELECT id, title, status FROM tasks WHERE id = ?", (run["task_id"],))
    return RunDetail(run, kids, evs[:MAX_EVENTS], len(evs) > MAX_EVENTS, approvals, task)


def step_count(store: Store, run_id: str) -> int:
    """How many steps the run's timeline has: its events of ``runner.events.STEP_KINDS``."""
    marks = ", ".join("?" for _ in STEP_KINDS)
    sql = f"SELECT COUNT(*) AS n FROM run_events WHERE run_id = ? AND kind IN ({marks})"
    row = store.one(sql, (run_id, *(str(k) for k in STEP_KINDS)))
    return int(row["n"]) if row else 0


def run_status(store: Store, run_id: str) -> dict[str, Any] | None:
    return store.one(
        "SELECT status, reason, iterations, prompt_tokens, completion_tokens, cost_usd, created_at, started_at, ended_at "
        "FROM runs WHERE id = ?",
        (run_id,),
    )


def approvals_audit(store: Store, *, before: int | None = None, limit: int = PAGE_SIZE) -> list[dict[str, Any]]:
    where, params = ("WHERE a.id < ?", [before]) if before else ("", [])
    rows = store.query(
        f"SELECT a.*, r.job FROM approvals a LEFT JOIN runs r ON r.id = a.run_id {where} ORDER BY a.id DESC LIMIT ?",
        (*params, limit),
    )
    for r in rows:
        try:
            r["reasons"] = json.loads(r["reasons"] or "[]")
        except ValueError:
            r["reasons"] = [r["reasons"]]
    return rows


def board_version(store: Store) -> tuple[int, str]:
    """Changes when the board changes: the newest task event and the newest task update."""
    row = store.one("SELECT (SELECT MAX(id) FROM task_events) AS e, (SELECT MAX(updated_at) FROM tasks) AS u")
    return (int(row["e"] or 0), str(row["u"] or "")) if row else (0, "")


def curator_runs(store: Store, limit: int = 20) -> list[dict[str, Any]]:
    rows = store.query("SELECT * FROM curator_runs ORDER BY started_at DESC LIMIT ?", (limit,))
    for r in rows:
        try:
            r["changes"] = json.loads(r["changes"] or "[]")
        except ValueError:
            r["changes"] = []
    return rows
