"""The run ledger: a row per run written before any work, a final status in a ``finally``.

Statuses and triggers are the enums of ``runner.statuses`` (stored as their string values).
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from runner.clock import iso, utcnow
from runner.procs import RUN_MARK, kill_marked, pid_alive, start_time
from runner.safety.redact import Redactor
from runner.statuses import FINAL, RunStatus, Trigger
from runner.store import Store, dumps
from runner.store.budget import settle
from runner.store.control import abandon
from runner.store.dialect import Dialect

HOST = os.uname().nodename  # what socket.gethostname() returns, without importing socket


def new_run_id(now: datetime | None = None) -> str:
    stamp = (now or utcnow()).astimezone(UTC).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{secrets.token_hex(3)}"


def create_run(
    store: Store,
    *,
    job: str,
    trigger: Trigger,
    status: RunStatus = RunStatus.RUNNING,
    slot: datetime | str | None = None,
    run_id: str | None = None,
    attempt: int = 1,
    parent_run: str | None = None,
    task_id: str | None = None,
    parent_run_id: str | None = None,
    now: datetime | None = None,
    waited_s: float | None = None,
    worker: str | None = None,
) -> str:
    """Insert the ledger row; raise sqlite3.IntegrityError if (job, slot, attempt) exists, or if
    the ``run_id`` given is taken (a generated one that is taken is drawn again).
    ``created_at`` is ``now``, by default the time of the insert. ``worker``: the ``runner worker``
    that holds the row from the start (its heartbeat, from now)."""
    now = now or utcnow()
    given = run_id
    row: dict[str, Any] = {
        "id": run_id or new_run_id(now),
        "job": job,
        "slot": iso(slot) if isinstance(slot, datetime) else slot,
        "trigger": trigger,
        "status": status,
        "created_at": iso(now),
        "attempt": attempt,
        "parent_run": parent_run,
        "task_id": task_id,
        "host": HOST,
    }
    if parent_run_id is not None:  # a subagent's row (the column is from migration m0009)
        row["parent_run_id"] = parent_run_id
    if waited_s is not None:
        row["waited_s"] = waited_s
    if worker is not None:
        row.update(worker=worker, heartbeat_at=iso(now))
    if status == RunStatus.RUNNING:
        row.update(started_at=iso(now), pid=os.getpid(), pid_start=start_time(os.getpid()))
    with store.transaction() as conn:
        # a generated id is the second plus 24 random bits: a burst of a thousand fires in one
        # second meets a taken id about once in thirty bursts, so a taken one is drawn again
        while not _insert_run(store, conn, row):
            if given is not None:
                raise sqlite3.IntegrityError(f"UNIQUE constraint failed: runs.id ({given})")
            row["id"] = new_run_id(now)
    return str(row["id"])


def _insert_run(store: Store, conn: sqlite3.Connection, row: dict[str, Any]) -> bool:
    """Insert the row; False when its id is taken; raise when its (job, slot, attempt) is."""
    cols = ", ".join(row)
    marks = ", ".join(f":{k}" for k in row)
    if store.dialect is Dialect.SQLITE:
        try:
            conn.execute(f"INSERT INTO runs ({cols}) VALUES ({marks})", row)
        except sqlite3.IntegrityError as exc:
            if str(exc) == "UNIQUE constraint failed: runs.id":
                return False
            raise
        return True
    # PostgreSQL: a failed statement would abort the caller's whole transaction (serve writes
    # a burst of fires in one), so neither identity is checked by failing
    if conn.execute(f"INSERT INTO runs ({cols}) VALUES ({marks}) ON CONFLICT DO NOTHING", row).rowcount == 1:
        return True
    if conn.execute("SELECT 1 FROM runs WHERE id = :id", row).fetchone() is not None:
        return False
    raise sqlite3.IntegrityError(
        f"UNIQUE constraint failed: runs (job {row['job']!r}, slot {row['slot']}, attempt {row['attempt']})"
    )


def mark_started(
    store: Store,
    run_id: str,
    *,
    pid: int | None = None,
    now: datetime | None = None,
    dispatched_at: datetime | None = None,
    waited_s: float | None = None,
) -> None:
    """The queued row starts: ``running`` with this process's pid; a row serve handed to a worker
    also gets ``dispatched_at`` and ``waited_s`` in the same write."""
    pid = pid or os.getpid()
    extra = ""
    values: tuple[Any, ...] = (RunStatus.RUNNING, iso(now or utcnow()), pid, start_time(pid), HOST)
    if dispatched_at is not None:
        extra = ", dispatched_at=?, waited_s=COALESCE(?, waited_s)"
        values += (iso(dispatched_at), waited_s)
    with store.transaction() as conn:
        conn.execute(
            f"UPDATE runs SET status=?, started_at=?, pid=?, pid_start=?, host=?{extra} WHERE id=?", (*values, run_id)
        )


def update_run(store: Store, run_id: str, **fields: Any) -> None:
    if not fields:
        return
    sets = ", ".join(f"{k}=:{k}" for k in fields)
    with store.transaction() as conn:
        conn.execute(f"UPDATE runs SET {sets} WHERE id=:_id", {**fields, "_id": run_id})


WORKER_LOST = "worker_lost"  # runs.reason of a run whose worker is gone (or was cut off) mid-run


def finish_run(store: Store, run_id: str, status: RunStatus, *, now: datetime | None = None, **fields: Any) -> bool:
    """The final status, and the run's budget reservation settled at its real cost, in one transaction.

    Refused (False) when the run was already declared lost (``unknown``, ``worker_lost``): its
    worker was cut off and the retry policy has taken over, so a late result of that worker (a
    partition that healed) never overwrites the verdict the retry was based on."""
    assert status in FINAL, status
    with store.transaction() as conn:
        row = conn.execute("SELECT status, reason FROM runs WHERE id=?", (run_id,)).fetchone()
        if row is not None and row[0] == RunStatus.UNKNOWN and row[1] == WORKER_LOST:
            return False
        update_run(store, run_id, status=status, ended_at=iso(now or utcnow()), **fields)
        settle(store, run_id, now=now)
        abandon(store, run_id, now=now)  # an approval it was parked on is answered by nobody now
    return True


def get_run(store: Store, run_id: str) -> dict[str, Any] | None:
    row = store.one("SELECT * FROM runs WHERE id=?", (run_id,))
    if row is None:
        matches = store.query("SELECT * FROM runs WHERE id LIKE ? LIMIT 2", (f"%{run_id}%",))
        row = matches[0] if len(matches) == 1 else None
    return row


def list_runs(
    store: Store,
    *,
    job: str | None = None,
    status: str | None = None,
    limit: int = 20,
    delivery_failed: bool = False,
) -> list[dict[str, Any]]:
    where, params = [], []
    if delivery_failed:
        where.append("delivery_failed = 1")
    if job:
        where.append("job = ?")
        params.append(job)
    if status:
        where.append("status = ?")
        params.append(status)
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    return store.query(f"SELECT * FROM runs {clause} ORDER BY created_at DESC, id DESC LIMIT ?", (*params, limit))


def last_output(store: Store, job: str) -> str:
    from runner.store.files import FileKind, read

    row = store.one(
        "SELECT id, output_path FROM runs WHERE job=? AND status=? AND output_path IS NOT NULL "
        "AND parent_run_id IS NULL ORDER BY created_at DESC LIMIT 1",  # a subagent's summary is not the job's output
        (job, RunStatus.SUCCEEDED),
    )
    if not row:
        return ""
    try:
        return read(store, row["id"], FileKind.OUTPUT, row["output_path"])
    except OSError:
        return ""


def recover_orphans(store: Store) -> list[str]:
    """Rows left ``running`` on this host by a process that is gone become ``unknown``, and what
    each such run left running is killed (its commands carry the run's mark in their environment);
    return the ids this call changed (each is changed by exactly one process, so each is alerted
    and swept once)."""
    rows = store.query("SELECT id, pid, pid_start FROM runs WHERE status=? AND host=?", (RunStatus.RUNNING, HOST))
    dead = [r["id"] for r in rows if not r["pid"] or not pid_alive(int(r["pid"]), r["pid_start"])]
    changed: list[str] = []
    for run_id in dead:
        with store.transaction() as conn:
            cur = conn.execute(
                "UPDATE runs SET status=?, ended_at=?, reason=COALESCE(reason, ?), "
                "error=COALESCE(error, 'the worker process disappeared before recording a final status') "
                "WHERE id=? AND status=?",
                (RunStatus.UNKNOWN, iso(utcnow()), WORKER_LOST, run_id, RunStatus.RUNNING),
            )
            if cur.rowcount:
                abandon(store, run_id)
                settle(store, run_id)  # what it spent (its events) is counted; its reservation is released
                changed.append(run_id)
    for run_id in changed:
        kill_leftovers(run_id)
    return changed


def kill_leftovers(run_id: str) -> int:
    """SIGKILL this user's processes started by run ``run_id``'s commands (``RUNNER_RUN_MARK`` is
    ``<run id>-<nonce>``), also those that left its process tree (``setsid``, double fork); the run's
    own process is gone already (that is why it is being recovered). Returns how many."""
    return kill_marked(RUN_MARK, f"{run_id}-", prefix=True)


def children(store: Store, run_id: str) -> list[dict[str, Any]]:
    """The child runs (subagents) ``run_id`` started, oldest first."""
    return store.query("SELECT * FROM runs WHERE parent_run_id=? ORDER BY created_at, id", (run_id,))


def events(store: Store, run_id: str, after: int = 0) -> list[dict[str, Any]]:
    return store.query(
        "SELECT seq, ts, kind, payload FROM run_events WHERE run_id=? AND seq>? ORDER BY seq", (run_id, after)
    )


INSERT_EVENT = "INSERT INTO run_events (run_id, seq, ts, kind, payload) VALUES (?, ?, ?, ?, ?)"


@dataclass
class Recorder:
    """Appends a run's events to run_events, redacted. Thread-safe; ``seq`` is 1, 2, 3..."""

    store: Store
    run_id: str
    redact: Redactor
    listener: Callable[[str, dict[str, Any]], None] | None = None  # sees each event as stored (progress)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        row = self.store.one("SELECT MAX(seq) AS n FROM run_events WHERE run_id=?", (self.run_id,))
        self._seq = int(row["n"] or 0) if row else 0
        self._held: list[tuple[Any, ...]] = []

    def __call__(self, kind: str, payload: dict[str, Any], *, hold: bool = False) -> None:
        """Append the event. ``hold``: the event takes its place (seq, time) now but is written
        with the run's next event, in the same write (a script-only run's ``pre_run`` goes with
        ``run_finished``, a few milliseconds later: one write lock fewer per run)."""
        clean = self.redact.redact_obj(payload)
        with self._lock:
            self._seq += 1
            row = (self.run_id, self._seq, iso(utcnow()), kind, dumps(clean))
            if hold:
                self._held.append(row)
            elif self._held:
                rows, self._held = [*self._held, row], []
                with self.store.transaction() as conn:
                    conn.executemany(INSERT_EVENT, rows)
            else:
                self.store.execute(INSERT_EVENT, row)
        if self.listener is not None:
            self.listener(kind, clean)
