"""The board: tasks and their transitions, claims with leases, and fencing.

Statuses: ``todo`` (waiting on parents) -> ``ready`` -> ``running`` (claimed, leased) ->
``done`` | ``blocked`` | ``failed``; ``archived`` hides a task. Every claim increments the
task's ``fence``; a worker's writes carry the fence it was given and succeed only while the
task is still ``running`` under that fence, so a worker whose lease was reclaimed is refused
(``FenceError``) instead of overwriting the new owner's work. Every write that first reads
runs inside ``BEGIN IMMEDIATE``; the event log row is written in the same transaction as the
change it records, so ``task_events`` is the board's history in commit order.

On PostgreSQL (a board shared by many machines) the hot writes lock only their rows: a claim
takes ready rows ``FOR UPDATE SKIP LOCKED`` (claimers never wait on each other's rows), a
fenced write or a renewal locks its task ``FOR UPDATE``; board-wide changes (promote, reclaim,
moves by hand, promoting a finished task's children) still take the store-wide lock.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from runner.clock import iso
from runner.errors import UsageError
from runner.host.procs import HOST
from runner.statuses import TaskStatus
from runner.store import Store, dumps
from runner.store.dialect import STORE_LOCK, Dialect
from runner.store.tasks import (
    AlreadyTaken,
    AttemptState,
    Claim,
    FenceError,
    Reclaimed,
    Task,
    TaskNotFound,
    backoff_seconds,
)

_CLAIM = (
    "SELECT id, fence, attempts FROM tasks INDEXED BY tasks_claim WHERE status='ready' "
    "AND (not_before IS NULL OR not_before <= ?) ORDER BY priority DESC, created_at, id LIMIT ?"
)
# PostgreSQL: a claim in one statement (no round trips between the pick, the update and the event):
# ready rows locked with SKIP LOCKED (claimers never wait on each other), taken, logged
_CLAIM_PG = (
    "WITH picked AS (SELECT id FROM tasks WHERE status='ready' AND (not_before IS NULL OR not_before <= ?) "
    "ORDER BY priority DESC, created_at, id LIMIT ? FOR UPDATE SKIP LOCKED), "
    "claimed AS (UPDATE tasks t SET status='running', fence=t.fence + 1, attempts=t.attempts + 1, lease_owner=?, "
    "lease_expires=?, host=?, worker_pid=NULL, worker_pid_start=NULL, not_before=NULL, updated_at=? "
    "FROM picked WHERE t.id = picked.id RETURNING t.id, t.fence, t.attempts, t.priority, t.created_at), "
    "logged AS (INSERT INTO task_events (task_id, ts, kind, fence, payload) SELECT id, ?, 'claimed', fence, "
    "'{\"owner\":' || to_json(?::text)::text || ',\"attempt\":' || attempts || '}' FROM claimed) "
    "SELECT id, fence, attempts FROM claimed ORDER BY priority DESC, created_at, id"
)
# PostgreSQL: a completion in one statement while the claim holds; 0 rows: the fenced path decides
_COMPLETE_PG = (
    "WITH done AS (UPDATE tasks SET status='done', result=?, lease_owner=NULL, lease_expires=NULL, updated_at=? "
    "WHERE id=? AND fence=? AND status='running' RETURNING id), "
    "logged AS (INSERT INTO task_events (task_id, ts, kind, fence, payload) SELECT id, ?, 'completed', ?, ? FROM done) "
    "SELECT (SELECT count(*) FROM done) AS n, EXISTS (SELECT 1 FROM task_links WHERE parent=?) AS waiting"
)


class Board:
    def __init__(self, store: Store, *, host: str = HOST):
        self.store = store
        self.host = host
        self._gate: int | None = None  # the writers' lock file, opened on the first write
        self._pg = store.dialect is Dialect.POSTGRESQL
        self._for_update = " FOR UPDATE" if self._pg else ""

    def close(self) -> None:
        if self._gate is not None:
            os.close(self._gate)
            self._gate = None

    @contextmanager
    def _tx(self, *, rows: bool = False) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` behind a ``flock`` every board writer shares: under contention writers
        queue in the kernel (woken at the holder's commit) instead of in SQLite's busy handler,
        whose growing sleeps starve some for seconds. Inside an open transaction: no gate.
        PostgreSQL: no gate; ``rows``: the writer locks its own rows (no store-wide lock)."""
        if self._pg:
            with self.store.transaction(lock=not rows) as conn:
                yield conn
            return
        if self.store.conn.in_transaction:
            with self.store.transaction() as conn:
                yield conn
            return
        if self._gate is None:
            self._gate = os.open(f"{self.store.path}.kanban-lock", os.O_RDWR | os.O_CREAT, 0o600)
        gate = self._gate
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            with self.store.transaction() as conn:
                yield conn
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)

    # -- creating -----------------------------------------------------------------------
    def add(
        self,
        title: str,
        *,
        now: datetime,
        body: str = "",
        parents: Sequence[int] = (),
        priority: int = 0,
        job: str | None = None,
        max_attempts: int = 3,
        created_by: str = "cli",
        fence: tuple[int, int] | None = None,
    ) -> int:
        """Insert a task (todo while any parent is not done, else ready); return its id.

        ``fence`` = (task id, fence): the creating worker's claim, checked in the same transaction.
        """
        if not title.strip():
            raise UsageError("a task needs a non-empty title")
        if max_attempts < 1:
            raise UsageError("max attempts must be at least 1")
        stamp = iso(now)

        def write(conn: sqlite3.Connection) -> int:
            waiting = False
            for parent in parents:
                row = conn.execute("SELECT status FROM tasks WHERE id=?", (parent,)).fetchone()
                if row is None:
                    raise TaskNotFound(f"no task {parent} (parent); see: runner kanban list")
                waiting = waiting or row["status"] != TaskStatus.DONE
            cur = conn.execute(
                "INSERT INTO tasks (title, body, status, priority, job, max_attempts, created_by, created_at, "
                "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    title,
                    body,
                    TaskStatus.TODO if waiting else TaskStatus.READY,
                    priority,
                    job,
                    max_attempts,
                    created_by,
                    stamp,
                    stamp,
                ),
            )
            task_id = int(cur.lastrowid or 0)
            conn.executemany(
                "INSERT OR IGNORE INTO task_links (parent, child) VALUES (?, ?)", [(p, task_id) for p in parents]
            )
            self._event(conn, task_id, "created", None, now, {"by": created_by, "parents": list(parents)})
            return task_id

        if fence is None:
            with self._tx() as conn:
                return write(conn)
        return int(self._fenced(fence[0], fence[1], "create", now, lambda conn, row: write(conn)))

    # -- reading ------------------------------------------------------------------------
    def get(self, task_id: int) -> Task:
        row = self.store.one("SELECT * FROM tasks WHERE id=?", (task_id,))
        if row is None:
            raise TaskNotFound(f"no task {task_id}; see: runner kanban list")
        return Task(**row)

    def tasks(self, *, status: str | None = None, include_archived: bool = False) -> list[Task]:
        where, params = (
            ("status = ?", [status]) if status else ("1 = 1" if include_archived else "status != 'archived'", [])
        )
        rows = self.store.query(f"SELECT * FROM tasks WHERE {where} ORDER BY priority DESC, created_at, id", params)
        return [Task(**r) for r in rows]

    def parents(self, task_id: int) -> list[Task]:
        return self._linked("l.parent = t.id WHERE l.child = ?", task_id)

    def children(self, task_id: int) -> list[Task]:
        return self._linked("l.child = t.id WHERE l.parent = ?", task_id)

    def _linked(self, join: str, task_id: int) -> list[Task]:
        rows = self.store.query(f"SELECT t.* FROM tasks t JOIN task_links l ON {join} ORDER BY t.id", (task_id,))
        return [Task(**r) for r in rows]

    def comments(self, task_id: int) -> list[dict[str, Any]]:
        return self.store.query(
            "SELECT author, body, created_at FROM task_comments WHERE task_id=? ORDER BY id", (task_id,)
        )

    def events(self, task_id: int) -> list[dict[str, Any]]:
        return self.store.query(
            "SELECT ts, kind, fence, payload FROM task_events WHERE task_id=? ORDER BY id", (task_id,)
        )

    def runs(self, task_id: int) -> list[dict[str, Any]]:
        return self.store.query(
            "SELECT id, job, status, reason, error, started_at, ended_at, iterations, cost_usd, output_path "
            "FROM runs WHERE task_id=? ORDER BY created_at, id",
            (str(task_id),),
        )

    def counts(self) -> dict[str, int]:
        return {
            r["status"]: r["n"] for r in self.store.query("SELECT status, COUNT(*) AS n FROM tasks GROUP BY status")
        }

    def any_ready(self, now: datetime) -> bool:
        """Whether a task is ready to claim now (one index probe: a dispatcher asks at every tick)."""
        row = self.store.one(
            "SELECT 1 AS x FROM tasks INDEXED BY tasks_claim WHERE status='ready' "
            "AND (not_before IS NULL OR not_before <= ?) LIMIT 1",
            (iso(now),),
        )
        return row is not None

    def fence_of(self, task_id: int) -> int | None:
        """The task's current fence (None: no such task)."""
        row = self.store.one("SELECT fence FROM tasks WHERE id=?", (task_id,))
        return None if row is None else int(row["fence"])

    def running_on(self, host: str) -> int:
        row = self.store.one("SELECT COUNT(*) AS n FROM tasks WHERE status='running' AND host=?", (host,))
        return int(row["n"]) if row else 0

    def running_claimed_by(self, owner_pattern: str) -> int:
        """Running tasks whose claim's owner matches ``owner_pattern`` (SQL ``LIKE``), wherever they run."""
        row = self.store.one(
            "SELECT COUNT(*) AS n FROM tasks WHERE status='running' AND lease_owner LIKE ?", (owner_pattern,)
        )
        return int(row["n"]) if row else 0

    # -- a person's moves ---------------------------------------------------------------
    def move(self, task_id: int, to: str, *, now: datetime, actor: str = "user") -> Task:
        """Set a task's status by hand. Leaving ``running`` revokes the worker's claim (its fence
        no longer matches a running task); moving a failed or blocked task back gives it fresh attempts."""
        try:
            status = TaskStatus(to)
        except ValueError:
            raise UsageError(f"unknown status {to!r}; use one of: {', '.join(TaskStatus)}") from None
        if status == TaskStatus.RUNNING:
            raise UsageError("a task becomes running only when the dispatcher claims it; move it to ready")
        with self._tx() as conn:
            before = self._row(conn, task_id)
            fresh = status in (TaskStatus.TODO, TaskStatus.READY) and before["status"] in (
                TaskStatus.FAILED,
                TaskStatus.BLOCKED,
            )
            if status == TaskStatus.READY and self._waiting(conn, task_id):
                status = TaskStatus.TODO
            conn.execute(
                "UPDATE tasks SET status=?, lease_owner=NULL, lease_expires=NULL, not_before=NULL, "
                "attempts=CASE WHEN ? THEN 0 ELSE attempts END, reason=CASE WHEN ?='blocked' THEN reason END, "
                "updated_at=? WHERE id=?",
                (status, fresh, status, iso(now), task_id),
            )
            self._event(
                conn, task_id, "moved", before["fence"], now, {"from": before["status"], "to": status, "by": actor}
            )
            if status == TaskStatus.DONE:
                self._promote_children(conn, task_id, now)
        return self.get(task_id)

    def comment(
        self, task_id: int, text: str, *, now: datetime, author: str = "user", fence: int | None = None
    ) -> None:
        if not text.strip():
            raise UsageError("the comment is empty")

        def write(conn: sqlite3.Connection, row: Any) -> None:
            conn.execute(
                "INSERT INTO task_comments (task_id, author, body, created_at) VALUES (?, ?, ?, ?)",
                (task_id, author, text, iso(now)),
            )
            self._event(conn, task_id, "commented", fence, now, {"by": author})

        if fence is not None:
            self._fenced(task_id, fence, "comment", now, write)
            return
        with self._tx() as conn:
            write(conn, self._row(conn, task_id))

    def block(self, task_id: int, reason: str, *, now: datetime, fence: int | None = None, actor: str = "user") -> None:
        if not reason.strip():
            raise UsageError("blocking needs a reason")

        def write(conn: sqlite3.Connection, row: Any) -> None:
            conn.execute(
                "UPDATE tasks SET status='blocked', reason=?, lease_owner=NULL, lease_expires=NULL, updated_at=? "
                "WHERE id=?",
                (reason, iso(now), task_id),
            )
            self._event(conn, task_id, "blocked", fence, now, {"reason": reason, "by": actor})

        if fence is not None:
            self._fenced(task_id, fence, "block", now, write)
            return
        with self._tx() as conn:
            row = self._row(conn, task_id)
            if row["status"] in (TaskStatus.DONE, TaskStatus.ARCHIVED):
                raise UsageError(f"task {task_id} is already {row['status']}; nothing to block")
            write(conn, row)

    def unblock(self, task_id: int, *, now: datetime) -> Task:
        if self.get(task_id).status != TaskStatus.BLOCKED:
            raise UsageError(f"task {task_id} is not blocked")
        return self.move(task_id, TaskStatus.READY, now=now)

    def retry(self, task_id: int, *, now: datetime, actor: str = "user") -> Task:
        """A ``failed`` or ``blocked`` task goes back to ``ready`` (``todo`` while a parent is
        unfinished) with one more attempt; its attempts so far stay counted. Any other state is a
        ``UsageError`` naming it."""
        with self._tx() as conn:
            row = self._row(conn, task_id)
            if row["status"] not in (TaskStatus.FAILED, TaskStatus.BLOCKED):
                raise UsageError(f"task {task_id} is {row['status']}; only a failed or blocked task can be retried")
            status = TaskStatus.TODO if self._waiting(conn, task_id) else TaskStatus.READY
            conn.execute(
                "UPDATE tasks SET status=?, lease_owner=NULL, lease_expires=NULL, not_before=NULL, reason=NULL, "
                "max_attempts=MAX(max_attempts, attempts + 1), updated_at=? WHERE id=?",
                (status, iso(now), task_id),
            )
            payload = {"from": row["status"], "to": status, "attempt": row["attempts"] + 1, "by": actor}
            self._event(conn, task_id, "retried", row["fence"], now, payload)
        return self.get(task_id)

    # -- the dispatcher -----------------------------------------------------------------
    def promote(self, *, now: datetime) -> list[int]:
        """todo -> ready for every task whose parents are all done."""
        if not self.store.one("SELECT 1 AS x FROM tasks WHERE status='todo' LIMIT 1"):
            return []
        with self._tx() as conn:
            ids = [r[0] for r in conn.execute(f"SELECT id FROM tasks t WHERE status='todo' AND {_PARENTS_DONE}")]
            self._set_ready(conn, ids, now)
        return ids

    def claim(self, owner: str, *, now: datetime, lease_seconds: float, limit: int = 1) -> list[Claim]:
        """Claim up to ``limit`` ready tasks, highest priority first, then oldest."""
        stamp, expires = iso(now), iso(now + timedelta(seconds=lease_seconds)) or ""
        if self._pg:
            rows = self.store.execute(
                _CLAIM_PG, (stamp, limit, owner, expires, self.host, stamp, stamp, owner)
            ).fetchall()
            return [Claim(r["id"], r["fence"], owner, expires, r["attempts"]) for r in rows]
        claims: list[Claim] = []
        with self._tx() as conn:
            rows = conn.execute(_CLAIM, (stamp, limit)).fetchall()
            for row in rows:
                fence = row["fence"] + 1
                cur = conn.execute(
                    "UPDATE tasks SET status='running', fence=?, attempts=attempts+1, lease_owner=?, lease_expires=?, "
                    "host=?, worker_pid=NULL, worker_pid_start=NULL, not_before=NULL, updated_at=? "
                    "WHERE id=? AND status='ready' AND fence=?",
                    (fence, owner, expires, self.host, stamp, row["id"], row["fence"]),
                )
                if cur.rowcount != 1:  # lost the compare-and-swap; cannot happen under BEGIN IMMEDIATE (or a row lock)
                    continue
                attempt = row["attempts"] + 1
                self._event(conn, row["id"], "claimed", fence, now, {"owner": owner, "attempt": attempt})
                claims.append(Claim(row["id"], fence, owner, expires, attempt))
        return claims

    def reclaim_expired(self, *, now: datetime, backoff: float) -> list[Reclaimed]:
        """Running tasks whose lease ran out: the attempt fails (ready with backoff, or failed)."""
        stamp = iso(now)
        if not self.store.one(
            "SELECT 1 AS x FROM tasks WHERE status='running' AND lease_expires < ? LIMIT 1", (stamp,)
        ):
            return []
        out: list[Reclaimed] = []
        with self._tx() as conn:
            rows = conn.execute(
                "SELECT * FROM tasks WHERE status='running' AND lease_expires < ?" + self._for_update, (stamp,)
            ).fetchall()
            for row in rows:
                where = f" (pid {row['worker_pid']} on {row['host']})" if row["worker_pid"] else ""
                error = f"lease expired: worker {row['lease_owner']}{where} stopped renewing"
                self._event(conn, row["id"], "reclaimed", row["fence"], now, {"owner": row["lease_owner"]})
                status = self._fail(conn, row, error, now, backoff)
                out.append(Reclaimed.from_row(row, status))
        return out

    # -- a worker's writes (fenced) -----------------------------------------------------
    def attach(
        self, task_id: int, fence: int, *, pid: int, pid_start: str | None, now: datetime, kind: str = "started"
    ) -> None:
        """Record the worker's pid (``spawned`` by the dispatcher, ``started`` by the worker itself)."""

        def write(conn: sqlite3.Connection, row: Any) -> None:
            conn.execute(
                "UPDATE tasks SET worker_pid=?, worker_pid_start=?, host=?, updated_at=? WHERE id=?",
                (pid, pid_start, self.host, iso(now), task_id),
            )
            self._event(conn, task_id, kind, fence, now, {"pid": pid, "host": self.host})

        self._fenced(task_id, fence, kind, now, write)

    def take(self, task_id: int, fence: int, *, pid: int, pid_start: str | None, now: datetime) -> None:
        """A remote worker (``runner worker``) takes the attempt a dispatcher sent it: only while the
        task is running under ``fence`` and no worker took it yet, so a message delivered twice (or
        late, after a reclaim) never starts the attempt twice; ``host`` (this Board's) names the
        worker. Else a ``refused`` event and ``FenceError`` (``AlreadyTaken`` when another delivery
        took it under the same fence)."""
        with self._tx(rows=True) as conn:
            row = self._row(conn, task_id)
            if row["fence"] == fence and row["status"] == TaskStatus.RUNNING and row["worker_pid"] is None:
                conn.execute(
                    "UPDATE tasks SET worker_pid=?, worker_pid_start=?, host=?, updated_at=? WHERE id=?",
                    (pid, pid_start, self.host, iso(now), task_id),
                )
                self._event(conn, task_id, "taken", fence, now, {"pid": pid, "host": self.host})
                return
            payload = {"action": "take", "current_fence": row["fence"], "host": self.host}
            self._event(conn, task_id, "refused", fence, now, payload)
        if row["fence"] == fence and row["status"] == TaskStatus.RUNNING:
            raise AlreadyTaken(task_id, fence, row["fence"], row["status"], "take")
        raise FenceError(task_id, fence, row["fence"], row["status"], "take")

    def attempt_states(self, task_ids: Sequence[int]) -> dict[int, AttemptState]:
        """Where these tasks stand (fence, status, whether a worker took the attempt), one query per 500."""
        out: dict[int, AttemptState] = {}
        for i in range(0, len(task_ids), 500):
            chunk = list(task_ids[i : i + 500])
            marks = ", ".join("?" * len(chunk))
            for r in self.store.query(f"SELECT id, fence, status, worker_pid FROM tasks WHERE id IN ({marks})", chunk):
                out[r["id"]] = AttemptState(r["id"], r["fence"], r["status"], r["worker_pid"] is not None)
        return out

    def renew(self, task_id: int, fence: int, *, now: datetime, lease_seconds: float) -> str:
        """Extend the lease: ``renewed``; ``ended`` when this worker already ended the task; else ``lost``."""
        expires = iso(now + timedelta(seconds=lease_seconds))
        with self._tx(rows=True) as conn:
            cur = conn.execute(
                "UPDATE tasks SET lease_expires=? WHERE id=? AND fence=? AND status='running'",
                (expires, task_id, fence),
            )
            if cur.rowcount == 1:
                return "renewed"
            row = conn.execute("SELECT fence, status FROM tasks WHERE id=?", (task_id,)).fetchone()
            if row is not None and row["fence"] == fence and row["status"] in (TaskStatus.DONE, TaskStatus.BLOCKED):
                return "ended"
            current = row["fence"] if row is not None else None
            self._event(conn, task_id, "refused", fence, now, {"action": "renew", "current_fence": current})
        return "lost"

    def complete(self, task_id: int, fence: int, result: str, *, now: datetime) -> None:
        if self._pg and not self.store.conn.in_transaction:
            stamp, payload = iso(now), dumps({"chars": len(result)})
            row = self.store.execute(
                _COMPLETE_PG, (result, stamp, task_id, fence, stamp, fence, payload, task_id)
            ).fetchone()
            if row is not None and row["n"] == 1:
                if row["waiting"]:
                    with self._tx() as conn:
                        self._promote_children(conn, task_id, now)
                return
            # not running under this fence (or gone): the fenced path records the refusal and raises

        def write(conn: sqlite3.Connection, row: Any) -> None:
            conn.execute(
                "UPDATE tasks SET status='done', result=?, lease_owner=NULL, lease_expires=NULL, updated_at=? "
                "WHERE id=?",
                (result, iso(now), task_id),
            )
            self._event(conn, task_id, "completed", fence, now, {"chars": len(result)})
            self._promote_children(conn, task_id, now)

        self._fenced(task_id, fence, "complete", now, write)

    def fail_attempt(self, task_id: int, fence: int, error: str, *, now: datetime, backoff: float) -> str:
        """This attempt failed: back to ready after a backoff, or failed after max_attempts."""
        return str(
            self._fenced(task_id, fence, "fail", now, lambda conn, row: self._fail(conn, row, error, now, backoff))
        )

    def worker_exited(self, task_id: int, fence: int, code: int, *, now: datetime, backoff: float) -> str | None:
        """The dispatcher saw its worker exit; if the task is still running under that claim, fail the attempt."""
        with self._tx(rows=True) as conn:
            row = conn.execute(
                "SELECT * FROM tasks WHERE id=? AND fence=? AND status='running'" + self._for_update, (task_id, fence)
            ).fetchone()
            if row is None:
                return None
            error = f"the worker exited with code {code} without ending the task (log: logs/kanban/{task_id}.log)"
            return self._fail(conn, row, error, now, backoff)

    # -- internals ----------------------------------------------------------------------
    def _fail(self, conn: sqlite3.Connection, row: Any, error: str, now: datetime, backoff: float) -> str:
        attempts, task_id = row["attempts"], row["id"]
        if attempts >= row["max_attempts"]:
            status, retry_at = TaskStatus.FAILED, None
        else:
            status, retry_at = TaskStatus.READY, iso(now + timedelta(seconds=backoff_seconds(backoff, attempts)))
        conn.execute(
            "UPDATE tasks SET status=?, error=?, not_before=?, lease_owner=NULL, lease_expires=NULL, updated_at=? "
            "WHERE id=?",
            (status, error, retry_at, iso(now), task_id),
        )
        payload = {"attempt": attempts, "error": error, "next": status, "retry_at": retry_at}
        self._event(conn, task_id, "attempt_failed", row["fence"], now, payload)
        if status == TaskStatus.FAILED:
            self._event(conn, task_id, "failed", row["fence"], now, {"attempts": attempts})
        return status

    def _row(self, conn: sqlite3.Connection, task_id: int) -> Any:
        row = conn.execute("SELECT * FROM tasks WHERE id=?" + self._for_update, (task_id,)).fetchone()
        if row is None:
            raise TaskNotFound(f"no task {task_id}; see: runner kanban list")
        return row

    def _fenced(
        self, task_id: int, fence: int, action: str, now: datetime, write: Callable[[sqlite3.Connection, Any], Any]
    ) -> Any:
        """Run ``write`` in one transaction only while the task is running under ``fence``.

        A stale fence records a ``refused`` event (committed) and raises FenceError."""
        with self._tx(rows=True) as conn:
            row = self._row(conn, task_id)
            if row["fence"] == fence and row["status"] == TaskStatus.RUNNING:
                return write(conn, row)
            self._event(conn, task_id, "refused", fence, now, {"action": action, "current_fence": row["fence"]})
        raise FenceError(task_id, fence, row["fence"], row["status"], action)

    def _waiting(self, conn: sqlite3.Connection, task_id: int) -> bool:
        return (
            conn.execute(f"SELECT 1 FROM tasks t WHERE id=? AND NOT {_PARENTS_DONE}", (task_id,)).fetchone() is not None
        )

    def _promote_children(self, conn: sqlite3.Connection, task_id: int, now: datetime) -> None:
        if self._pg:  # two parents finishing at once must not both miss that the other is done
            if conn.execute("SELECT 1 FROM task_links WHERE parent=? LIMIT 1", (task_id,)).fetchone() is None:
                return
            conn.execute("SELECT pg_advisory_xact_lock(?)", (STORE_LOCK,))
        ids = [
            r[0]
            for r in conn.execute(
                f"SELECT t.id FROM tasks t JOIN task_links l ON l.child = t.id "
                f"WHERE l.parent = ? AND t.status = 'todo' AND {_PARENTS_DONE}",
                (task_id,),
            )
        ]
        self._set_ready(conn, ids, now)

    def _set_ready(self, conn: sqlite3.Connection, ids: Iterable[int], now: datetime) -> None:
        for task_id in ids:
            conn.execute(
                "UPDATE tasks SET status='ready', updated_at=? WHERE id=? AND status='todo'", (iso(now), task_id)
            )
            self._event(conn, task_id, "promoted", None, now, {})

    @staticmethod
    def _event(
        conn: sqlite3.Connection, task_id: int, kind: str, fence: int | None, now: datetime, payload: dict[str, Any]
    ) -> None:
        conn.execute(
            "INSERT INTO task_events (task_id, ts, kind, fence, payload) VALUES (?, ?, ?, ?, ?)",
            (task_id, iso(now), kind, fence, dumps(payload)),
        )


# A task (aliased ``t``) none of whose parents is unfinished.
_PARENTS_DONE = "NOT EXISTS (SELECT 1 FROM task_links l2 JOIN tasks p ON p.id = l2.parent WHERE l2.child = t.id AND p.status != 'done')"
