"""Retention: old runs leave the ledger (with their events and approval audit, by ``ON DELETE
CASCADE``), their output files and transcripts leave RUNNER_HOME, and the space goes back to the
file system (``PRAGMA incremental_vacuum``).

``Pruner`` is the one implementation: `runner runs prune` drives it to the end at once, serve's
``RetentionLoop`` (runner/serve/loops.py) one small batch at a time, so fires stay on time. A
batch is sized by time, not only by count: a run's events, search-index texts and audit go with
it, so 500 runs can hold the write lock for a second on a big ledger. Each transaction aims at
``BATCH_SECONDS`` (the next batch grows or shrinks to fit, up to ``batch`` runs), and a pause of
``PAUSE_S`` follows each, so another writer (serve's fire, a worker's event) waits one short
transaction at most, whatever the ledger's size.
The candidates are chosen once (a run older than the cut-off and not among the newest
``keep_last`` of its job); every batch's ``DELETE`` checks again that a run is safe to remove
(``SAFE``), so a run that became referenced meanwhile is kept.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from runner.statuses import ACTIVE, TaskStatus
from runner.store import Store
from runner.store.dialect import Dialect

FINISHED_TASKS = (TaskStatus.DONE, TaskStatus.FAILED, TaskStatus.ARCHIVED)
_LIVE = ", ".join(f"'{s}'" for s in sorted(ACTIVE))  # queued, running, waiting
VACUUM_PAGES = 2000  # pages given back per incremental_vacuum step (8 MB at 4 KiB pages)
BATCH_SECONDS = 0.025  # what one batch's transaction aims to hold the write lock for
FIRST_BATCH = 20  # runs in the first batch; the next ones are sized by how long it took
#: between two transactions: longer than SQLite's busy handler sleeps between its tries while a
#: writer has waited less than ~80 ms (1, 2, 5, 10, 15, 20, 25 ms), so a writer that meets a batch
#: (a fire, a worker's event) gets the lock at its next try after it, not the batch after that
PAUSE_S = 0.05
VACUUM_STEP_MOST = 1000  # pages per incremental_vacuum step of run(): ~65 ms at worst
FULL_VACUUM_BYTES = 64 * 1024 * 1024  # live data up to this: one VACUUM instead of incremental steps

#: a run may go only if nothing live still needs it: not queued/running/waiting, no open budget
#: reservation, no pending approval, no unfinished kanban task, no active child run
_SAFE = f"""
    runs.status NOT IN ({_LIVE})
    AND NOT EXISTS (SELECT 1 FROM budget_runs b WHERE b.run_id = runs.id AND b.state = 'open')
    AND NOT EXISTS (SELECT 1 FROM approval_requests a WHERE a.run_id = runs.id AND a.status = 'pending')
    AND (runs.task_id IS NULL OR EXISTS (
        SELECT 1 FROM tasks t WHERE t.id = {{TASK_ID}} AND t.status IN ({", ".join(f"'{s}'" for s in FINISHED_TASKS)})))
    AND NOT EXISTS (SELECT 1 FROM runs c WHERE c.parent_run_id = runs.id AND c.status IN ({_LIVE}))
"""
SAFE = _SAFE.replace("{TASK_ID}", "runs.task_id")
#: PostgreSQL: ``runs.task_id`` is TEXT and ``tasks.id`` BIGINT there (no implicit comparison)
SAFE_PG = _SAFE.replace("{TASK_ID}", "CAST(runs.task_id AS BIGINT)")


def _safe(store: Store) -> str:
    return SAFE_PG if store.dialect is Dialect.POSTGRESQL else SAFE


@dataclass(frozen=True)
class Policy:
    """What to prune: runs created before ``now - older_than``, keeping the newest ``keep_last`` per job."""

    older_than: float  # seconds
    keep_last: int
    outputs: bool = True
    transcripts: bool = True

    def cutoff(self, now: datetime) -> str:
        return (now - timedelta(seconds=self.older_than)).astimezone(UTC).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class PruneResult:
    runs: int
    events: int
    approvals: int
    files: int
    bytes_freed: int  # of the database file (after incremental vacuum) plus the files removed
    dry_run: bool
    oldest: str | None = None
    newest: str | None = None


@dataclass
class Pruner:
    """Prunes ``store`` by ``policy``, at most ``batch`` runs per transaction, each aiming at
    ``budget_s`` seconds (see the module doc). ``step()`` does one batch and says whether more is
    left; ``vacuum_step()`` gives back up to ``VACUUM_PAGES`` pages; ``last_s``: how long the last
    transaction held the write lock."""

    store: Store
    home: Path
    policy: Policy
    now: datetime
    batch: int = 500
    budget_s: float = BATCH_SECONDS
    last_s: float = field(default=0.0, init=False)
    _size: int = field(default=0, init=False)
    _ids: list[str] = field(default_factory=list, init=False, repr=False)
    _pos: int = field(default=0, init=False)
    _counts: dict[str, int] = field(default_factory=lambda: dict(runs=0, events=0, approvals=0, files=0, fbytes=0))

    def __post_init__(self) -> None:
        self._ids = candidates(self.store, self.policy, self.now)
        self._size_before = _db_bytes(self.store)

    @property
    def pending(self) -> int:
        return len(self._ids) - self._pos

    def step(self) -> bool:
        """Delete the next batch of candidates (re-checked against ``SAFE``); True while more are left."""
        size = self._size or min(self.batch, FIRST_BATCH)
        ids = self._ids[self._pos : self._pos + size]
        self._pos += len(ids)
        if ids:
            self._delete(ids)
            self._size = fit(size, self.last_s, self.budget_s, self.batch)
        return self._pos < len(self._ids)

    def _delete(self, ids: list[str]) -> None:
        marks = ", ".join("?" for _ in ids)
        with self._timed() as conn:
            rows = conn.execute(
                f"SELECT id, output_path FROM runs WHERE id IN ({marks}) AND {_safe(self.store)}", ids
            ).fetchall()
            gone = [r["id"] for r in rows]
            if not gone:
                return
            gmarks = ", ".join("?" for _ in gone)
            # the children first, explicitly (counted as they go; the cascade then finds nothing)
            self._counts["events"] += conn.execute(f"DELETE FROM run_events WHERE run_id IN ({gmarks})", gone).rowcount
            self._counts["approvals"] += conn.execute(
                f"DELETE FROM approvals WHERE run_id IN ({gmarks})", gone
            ).rowcount
            conn.execute(f"DELETE FROM budget_runs WHERE run_id IN ({gmarks}) AND state = 'settled'", gone)
            conn.execute(f"DELETE FROM runs WHERE id IN ({gmarks})", gone)
        self._counts["runs"] += len(gone)
        for path in run_files(self.home, self.policy, [(r["id"], r["output_path"]) for r in rows]):
            self._remove(path)

    @contextmanager
    def _timed(self) -> Iterator[sqlite3.Connection]:
        """The store's transaction, its time from the lock taken to the commit kept in ``last_s``."""
        with self.store.transaction() as conn:
            started = time.monotonic()
            yield conn
        self.last_s = time.monotonic() - started

    def _remove(self, path: Path) -> None:
        try:
            size = path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            return
        self._counts["files"] += 1
        self._counts["fbytes"] += size

    def vacuum_step(self, pages: int = VACUUM_PAGES) -> bool:
        """Give back up to ``pages`` free pages to the file system; True while free pages are left."""
        if self.store.dialect is Dialect.POSTGRESQL:
            return False  # the server's autovacuum returns space
        with self.store.guard():
            started = time.monotonic()
            # executescript steps the pragma to its end (execute() steps once: one page per call)
            self.store.conn.executescript(f"PRAGMA incremental_vacuum({int(pages)});")
            self.last_s = time.monotonic() - started
            left = self.store.conn.execute("PRAGMA freelist_count").fetchone()[0]
        return bool(left) and _auto_vacuum(self.store) == 2

    def vacuum(self) -> None:
        """Give back every free page: a whole ``VACUUM`` when most of the file is free and what is
        left is small (it copies only the live pages, far cheaper than moving them one by one),
        else incremental steps."""
        if self.store.dialect is Dialect.POSTGRESQL:
            return
        with self.store.guard():
            free = self.store.conn.execute("PRAGMA freelist_count").fetchone()[0]
            total = self.store.conn.execute("PRAGMA page_count").fetchone()[0]
            size = self.store.conn.execute("PRAGMA page_size").fetchone()[0]
        live = total - free
        if free > live and live * size <= FULL_VACUUM_BYTES:
            with self.store.guard():
                self.store.conn.execute("VACUUM")
            return
        pages = min(VACUUM_PAGES, 200)
        while self.vacuum_step(pages):
            # at most VACUUM_STEP_MOST pages: a step's time per page varies 3x (measured on a 7 GB
            # ledger: ~20 us median, ~65 us at worst), so a step sized to the budget can overshoot
            pages = fit(pages, self.last_s, self.budget_s, VACUUM_STEP_MOST)
            time.sleep(PAUSE_S)

    def run(self) -> PruneResult:
        """Everything at once (the CLI): every batch, then the vacuum, with ``PAUSE_S`` between
        two transactions, so other writers meet the lock free between them."""
        while self.step():
            time.sleep(PAUSE_S)
        self.vacuum()
        with self.store.guard():  # in WAL mode the file shrinks at a checkpoint
            # PASSIVE first, beside other writers; TRUNCATE (which holds them off while it copies)
            # then finds little or nothing left to copy
            self.store.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            self.store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        return self.result()

    def result(self) -> PruneResult:
        c = self._counts
        freed = max(0, self._size_before - _db_bytes(self.store)) + c["fbytes"]
        return PruneResult(c["runs"], c["events"], c["approvals"], c["files"], freed, dry_run=False)


def fit(size: int, took: float, budget: float, most: int) -> int:
    """The next batch's size after one of ``size`` took ``took`` seconds: scaled down to fit
    ``budget`` when over it, doubled when under half of it, at least 1 and at most ``most``."""
    if took > budget:
        size = int(size * budget / took * 0.8)
    elif took < budget / 2:
        size *= 2
    return max(1, min(most, size))


def candidates(store: Store, policy: Policy, now: datetime) -> list[str]:
    """Ids of runs older than the cut-off that are not among the newest ``keep_last`` of their job
    nor a job's newest succeeded run (its output is the next run's ``last_output``), oldest first."""
    with store.guard():  # plain tuples: 100,000 dicts would hold the GIL serve's loop needs
        cursor = store.conn.execute(
            """
        SELECT id FROM (
            SELECT id, created_at, status, job,
                   ROW_NUMBER() OVER (PARTITION BY job ORDER BY created_at DESC, id DESC) AS n,
                   ROW_NUMBER() OVER (PARTITION BY job, status = 'succeeded' ORDER BY created_at DESC, id DESC) AS s
            FROM runs
        ) AS ranked
        WHERE created_at < ? AND n > ? AND NOT (status = 'succeeded' AND s = 1)
        ORDER BY created_at, id
        """,
            (policy.cutoff(now), policy.keep_last),
        )
        return [str(r[0]) for r in cursor]


def plan(store: Store, home: Path, policy: Policy, now: datetime, batch: int = 500) -> PruneResult:
    """What pruning would remove, changing nothing (``--dry-run``)."""
    ids = candidates(store, policy, now)
    runs = events = approvals = files = size = 0
    oldest = newest = None
    for start in range(0, len(ids), batch):
        chunk = ids[start : start + batch]
        marks = ", ".join("?" for _ in chunk)
        rows = store.query(
            f"SELECT id, created_at, output_path FROM runs WHERE id IN ({marks}) AND {_safe(store)}", chunk
        )
        gone = [r["id"] for r in rows]
        if not gone:
            continue
        oldest = oldest or min(r["created_at"] for r in rows)
        newest = max(r["created_at"] for r in rows)
        runs += len(gone)
        gmarks = ", ".join("?" for _ in gone)
        events += store.one(f"SELECT COUNT(*) AS n FROM run_events WHERE run_id IN ({gmarks})", gone)["n"]  # type: ignore[index]
        approvals += store.one(f"SELECT COUNT(*) AS n FROM approvals WHERE run_id IN ({gmarks})", gone)["n"]  # type: ignore[index]
        for path in run_files(home, policy, [(r["id"], r["output_path"]) for r in rows]):
            try:
                size += path.stat().st_size
                files += 1
            except FileNotFoundError:
                continue
    return PruneResult(runs, events, approvals, files, size, dry_run=True, oldest=oldest, newest=newest)


def run_files(home: Path, policy: Policy, rows: list[tuple[str, str | None]]) -> Iterator[Path]:
    """The files of pruned runs ``(id, output_path)`` the policy removes: outputs (only under
    RUNNER_HOME/outputs; a file delivery elsewhere is the user's) and transcripts."""
    outputs, transcripts = home / "outputs", home / "logs" / "runs"
    for run_id, output in rows:
        if policy.outputs and output and _inside(Path(output), outputs):
            yield Path(output)
        if policy.transcripts:
            yield transcripts / f"{run_id}.json"


def old_logs(home: Path, store: Store, older_than: float, now: datetime) -> list[Path]:
    """Kanban attempt logs (``logs/kanban/TASK.log``) untouched for ``older_than`` seconds whose task is finished or gone."""
    folder = home / "logs" / "kanban"
    if not folder.is_dir():
        return []
    limit = now.timestamp() - older_than
    finished = {
        str(r["id"]) for r in store.query("SELECT id FROM tasks WHERE status IN ('done', 'failed', 'archived')")
    }
    live = {
        str(r["id"]) for r in store.query("SELECT id FROM tasks WHERE status NOT IN ('done', 'failed', 'archived')")
    }
    out = []
    for path in folder.glob("*.log"):
        try:
            old = path.stat().st_mtime < limit
        except FileNotFoundError:
            continue
        if old and (path.stem in finished or path.stem not in live):
            out.append(path)
    return sorted(out)


def _inside(path: Path, folder: Path) -> bool:
    try:
        return path.resolve().is_relative_to(folder.resolve())
    except OSError:
        return False


def _db_bytes(store: Store) -> int:
    try:
        return os.stat(store.path).st_size
    except OSError:
        return 0


def _auto_vacuum(store: Store) -> int:
    try:
        return int(store.conn.execute("PRAGMA auto_vacuum").fetchone()[0])
    except sqlite3.Error:
        return 0
