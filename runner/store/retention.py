"""Retention: old runs leave the ledger (with their events and approval audit), their output files
and transcripts leave RUNNER_HOME, and the space goes back to the file system (``PRAGMA
incremental_vacuum``).

``Pruner`` is the one implementation: `runner runs prune` drives it to the end at once, serve's
``RetentionLoop`` (runner/serve/loops.py) one step at a time, so fires stay on time. A step is one
transaction that stops once it has held the write lock for ``BATCH_SECONDS``: runs are deleted
``CHUNK`` at a time (their events, search-index texts and audit with them: what a run costs varies
with the ledger's size and layout, so no batch size fits every ledger). On SQLite a pause of
``PAUSE_S`` follows each step, so another writer (serve's fire, a worker's event) waits one short
transaction at most, whatever the ledger's size. PostgreSQL needs none: a writer waiting for the
store's lock is granted it at the step's COMMIT, and the next step's request queues behind it.

The space each chunk frees goes back to the file system in the same transaction, page by page:
SQLite finds each free page it gives back by walking the whole free list, so with the half million
pages a big prune frees on the list a page can cost a millisecond (measured on a 7 GB ledger),
where a list of one chunk's pages costs nothing to walk. The pruner's connection checkpoints the
WAL itself between its transactions (its automatic checkpoint, which runs inside the COMMIT that
crosses 1,000 pages, is off meanwhile), so a step's time is its hold of the lock.

The candidates are chosen once (a run older than the cut-off and not among the newest
``keep_last`` of its job); each chunk's ``DELETE`` checks again that a run is safe to remove
(``SAFE``), so a run that became referenced meanwhile is kept.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from runner.statuses import ACTIVE, TaskStatus
from runner.store import Store
from runner.store.dialect import Dialect

FINISHED_TASKS = (TaskStatus.DONE, TaskStatus.FAILED, TaskStatus.ARCHIVED)
_LIVE = ", ".join(f"'{s}'" for s in sorted(ACTIVE))  # queued, running, waiting
BATCH_SECONDS = 0.025  # how long one step's transaction holds the write lock (one chunk or page more at most)
CHUNK = 16  # runs per statement within a step (one statement per run cost ~9x more a run)
#: between two transactions: longer than SQLite's busy handler sleeps between its tries while a
#: writer has waited less than ~80 ms (1, 2, 5, 10, 15, 20, 25 ms), so a writer that meets a batch
#: (a fire, a worker's event) gets the lock at its next try after it, not the batch after that
PAUSE_S = 0.05

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
    longest_hold_ms: float = 0.0  # the longest a transaction of the prune held the write lock


@dataclass
class Pruner:
    """Prunes ``store`` by ``policy``, one transaction per ``step()`` that stops once it has held the
    write lock for ``budget_s`` (see the module doc): runs deleted a chunk at a time, at most
    ``batch``, the space they free given back with them (a step that finds free pages left over
    gives them back alone). ``last_s``: how long the last transaction held the
    write lock; ``longest_s``: the longest any did."""

    store: Store
    home: Path
    policy: Policy
    now: datetime
    batch: int = 500
    budget_s: float = BATCH_SECONDS
    last_s: float = field(default=0.0, init=False)
    longest_s: float = field(default=0.0, init=False)
    _ids: list[str] = field(default_factory=list, init=False, repr=False)
    _pos: int = field(default=0, init=False)
    _counts: dict[str, int] = field(default_factory=lambda: dict(runs=0, events=0, approvals=0, files=0, fbytes=0))

    def __post_init__(self) -> None:
        self._ids = candidates(self.store, self.policy, self.now)
        self._size_before = _db_bytes(self.store)
        self._sqlite = self.store.dialect is Dialect.SQLITE
        self._shrinks = self._sqlite and _auto_vacuum(self.store) == 2
        self._safe = _safe(self.store)
        if self._sqlite:  # checkpoints between the transactions, by step() (module doc)
            with self.store.guard():
                self._autocheckpoint = int(self.store.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0])
                self.store.conn.execute("PRAGMA wal_autocheckpoint=0")

    @property
    def pending(self) -> int:
        return len(self._ids) - self._pos

    def step(self) -> bool:
        """One transaction: give back free pages while the last step left some, else delete
        candidates (each re-checked against ``SAFE``). True while work is left."""
        if self._free():
            self._give_back()
        elif self.pending:
            self._delete()
        if self._sqlite:
            with self.store.guard():  # PASSIVE: beside other writers, never holding them off
                self.store.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        more = bool(self.pending) or bool(self._free())
        if not more:
            self._finish()
        return more

    def _delete(self) -> None:
        """Candidates ``CHUNK`` at a time (at least one chunk), the space each chunk frees given
        back at once, until the budget is spent or ``batch`` runs went; then their files."""
        gone: list[tuple[str, str | None]] = []
        with self._timed() as (conn, spent):
            first = True
            while self.pending and len(gone) < self.batch and (first or spent() < self.budget_s):
                first = False
                ids = self._ids[self._pos : self._pos + min(CHUNK, self.batch - len(gone))]
                self._pos += len(ids)
                marks = ", ".join("?" for _ in ids)
                rows = conn.execute(
                    f"SELECT id, output_path FROM runs WHERE id IN ({marks}) AND {self._safe}", ids
                ).fetchall()
                if not rows:  # live, referenced, or gone meanwhile: kept
                    continue
                safe = [r["id"] for r in rows]
                marks = ", ".join("?" for _ in safe)
                # the children first, explicitly (counted as they go; the cascade then finds nothing)
                self._counts["events"] += conn.execute(
                    f"DELETE FROM run_events WHERE run_id IN ({marks})", safe
                ).rowcount
                self._counts["approvals"] += conn.execute(
                    f"DELETE FROM approvals WHERE run_id IN ({marks})", safe
                ).rowcount
                conn.execute(f"DELETE FROM budget_runs WHERE run_id IN ({marks}) AND state = 'settled'", safe)
                conn.execute(f"DELETE FROM runs WHERE id IN ({marks})", safe)
                gone.extend((r["id"], r["output_path"]) for r in rows)
                self._vacuum(conn)  # one chunk's pages: a few hundred at most, microseconds each
        self._counts["runs"] += len(gone)
        for path in run_files(self.home, self.policy, gone):
            self._remove(path)

    def _give_back(self) -> None:
        """A step of giving back free pages alone (what the last step left), until the budget."""
        with self._timed() as (conn, spent):
            self._vacuum(conn, spent)

    def _vacuum(self, conn: sqlite3.Connection, spent: Callable[[], float] | None = None) -> None:
        """Free pages back to the file system one by one, in the open transaction, until none is
        left or (given ``spent``) the budget is spent."""
        if not self._shrinks:
            return
        free = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
        # each execute() steps the pragma once, which gives back one page (executescript would step
        # it to its end, but it commits the transaction it is called in first)
        for _ in range(free):
            conn.execute("PRAGMA incremental_vacuum")
            if spent is not None and spent() >= self.budget_s:
                return

    @contextmanager
    def _timed(self) -> Iterator[tuple[sqlite3.Connection, Callable[[], float]]]:
        """The store's transaction and a clock of the seconds since it took the lock; the time from
        the lock taken to the commit is kept in ``last_s``."""
        with self.store.transaction() as conn:
            started = time.monotonic()
            yield conn, lambda: time.monotonic() - started
        self.last_s = time.monotonic() - started
        self.longest_s = max(self.longest_s, self.last_s)

    def _remove(self, path: Path) -> None:
        try:
            size = path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            return
        self._counts["files"] += 1
        self._counts["fbytes"] += size

    def _free(self) -> int:
        """Free pages this prune can give back (0 on PostgreSQL, whose autovacuum does it, and on
        a SQLite file made without incremental auto-vacuum)."""
        if not self._shrinks:
            return 0
        with self.store.guard():
            return int(self.store.conn.execute("PRAGMA freelist_count").fetchone()[0])

    @property
    def pause(self) -> float:
        """Seconds to wait between two steps (module doc): SQLite's busy handler only tries again
        after a sleep, PostgreSQL's lock queue hands the lock over at COMMIT."""
        return PAUSE_S if self._sqlite else 0.0

    def _finish(self) -> None:
        """The connection's automatic checkpoint back as it was."""
        if self._sqlite:
            with self.store.guard():
                self.store.conn.execute(f"PRAGMA wal_autocheckpoint={self._autocheckpoint}")

    def run(self) -> PruneResult:
        """Everything at once (the CLI): every step, with ``pause`` between two transactions, so
        other writers meet the lock free between them."""
        while self.step():
            time.sleep(self.pause)
        if self._sqlite:
            with self.store.guard():  # in WAL mode the file shrinks at a checkpoint
                # TRUNCATE holds other writers off while it copies: the steps' PASSIVE checkpoints
                # left it nothing or little to copy
                self.store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        return self.result()

    def result(self) -> PruneResult:
        c = self._counts
        freed = max(0, self._size_before - _db_bytes(self.store)) + c["fbytes"]
        return PruneResult(
            c["runs"],
            c["events"],
            c["approvals"],
            c["files"],
            freed,
            dry_run=False,
            longest_hold_ms=round(self.longest_s * 1000, 1),
        )


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
