"""The run ledger's one owner: every change of a run's status goes through here.

A run's status moves along ``LEGAL`` only: ``queued -> running -> a final status``, or straight
from ``queued`` to a final one (a skipped, missed, cancelled or never-started run); a running run
parked on a manual approval is ``waiting`` until the request is answered, expires or is cancelled
(``wait``, ``resume``), and a waiting run whose worker is lost, killed or stopped ends from there.
A final status never changes again. Each operation names an intent (``open_run``, ``start``,
``wait``, ``resume``, ``finish``, ``declare_lost``, ``claim_for_worker``, ``request_stop``, ``recover_orphans``, ``recover_stale``,
``worker_died``: the one lost-worker recovery, which every ``runner.run.forks.Launcher`` uses) and is one guarded
``UPDATE ... WHERE status IN (...)``: it returns whether it won. Two writers that race (a worker
finishing while serve declares it lost, serve's backstop after the worker wrote its own end)
cannot both win: the loser gets False, and the row keeps the first verdict.

One move leaves a final status: ``refuse_result`` (-> failed, ``refused``), for a kanban attempt
whose result a newer claim fenced out after it ended.

A write the table calls impossible (starting a finished run, finishing a run into ``queued``) is
refused: logged in production, raised when ``RUNNER_LEDGER_STRICT`` is set (the test suite sets it),
so a new writer that breaks the rules fails its tests.

Columns other than the status (tokens, cost, model, output path, delivery) are set with
``set_fields``, which refuses the status columns; ``progress`` writes a live run's turns, tokens
and cost as it goes (only while the run is active, so it never overwrites a final row).
"""

from __future__ import annotations

import os
import secrets
import signal
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from runner.clock import iso, utcnow
from runner.config.schedules import format_duration
from runner.host.procs import HOST, RUN_MARK, kill_marked, pid_alive, start_time
from runner.statuses import ACTIVE, FINAL, STARTED, RunStatus, Trigger
from runner.store import Store, StoreError
from runner.store.budget import settle
from runner.store.control import abandon
from runner.store.dialect import Dialect

NOT_TAKEN = "-"  # runs.worker of a row serve ended before any worker took it
_ACTIVE_MARKS = ", ".join("?" * len(ACTIVE))
_STARTED_MARKS = ", ".join("?" * len(STARTED))


class Reason(StrEnum):
    """The reasons the ledger's supervisors write, and those of a run's own steps that no error
    carries (a run's own failures carry the reason of the error that ended it: ``RunnerError.reason``;
    ``runner.errors.ToolsUnavailable``'s is ``TOOLS_UNAVAILABLE``)."""

    WORKER_LOST = "worker_lost"  # its worker stopped sending heartbeats, or its process is gone
    WORKER_DIED = "worker_died"  # its process exited without recording an end
    NOT_STARTED = "not_started"  # stopped before a worker took it
    SPAWN = "spawn"  # its worker process could not be started
    OVERLAP = "overlap"  # another run of the job was still going
    REPLACED = "replaced"  # a newer slot replaced it (overlap: replace)
    CANCELLED = "cancelled"  # runner runs cancel
    SHUTDOWN = "shutdown"  # serve stopped while it waited or ran
    TIMEOUT = "timeout"  # the job's wall-clock timeout
    REFUSED = "refused"  # a kanban worker refused the task's run
    PRE_RUN = "pre_run"  # the pre_run failed (a non-zero exit or its pre_run_timeout): failed
    WAKE_FALSE = "wake_false"  # the pre_run's last line was {"wake": false}: skipped
    PRE_RUN_EMPTY = "pre_run_empty"  # the pre_run printed nothing and the job has skip_when_empty: skipped
    TOOLS_UNAVAILABLE = "tools_unavailable"  # an MCP server the job needs did not start: failed


WORKER_LOST = Reason.WORKER_LOST

# the legal moves of a run's status; a final status has none
LEGAL: dict[RunStatus, frozenset[RunStatus]] = {
    RunStatus.QUEUED: frozenset(FINAL | {RunStatus.RUNNING}),
    # a started run that finds it must not go on (the budget, a pre_run that says skip) ends skipped
    RunStatus.RUNNING: frozenset(
        {
            RunStatus.WAITING,
            RunStatus.SUCCEEDED,
            RunStatus.FAILED,
            RunStatus.TIMED_OUT,
            RunStatus.INTERRUPTED,
            RunStatus.UNKNOWN,
            RunStatus.SKIPPED,
        }
    ),
    # parked on an approval: back to running once it is answered, expired or cancelled; or ended by
    # someone else meanwhile (lost, its worker died, serve stopped it) or by a failure while it waited
    RunStatus.WAITING: frozenset(
        {RunStatus.RUNNING, RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.INTERRUPTED, RunStatus.UNKNOWN}
    ),
    **{status: frozenset() for status in FINAL},
}
STATUS_COLUMNS = frozenset({"status", "ended_at", "started_at"})  # written by the operations only


class IllegalTransition(StoreError):
    """A write the ledger's transition table forbids (raised when ``RUNNER_LEDGER_STRICT`` is set)."""

    reason = "store_error"


def sources(to: RunStatus) -> tuple[RunStatus, ...]:
    """The statuses a run may move to ``to`` from."""
    return tuple(s for s, targets in LEGAL.items() if to in targets)


@dataclass(frozen=True)
class RunRow:
    """A ledger row as the program reads it (``runs``'s main columns, typed)."""

    id: str
    job: str
    trigger: Trigger
    status: RunStatus
    created_at: str
    slot: str | None = None
    attempt: int = 1
    started_at: str | None = None
    ended_at: str | None = None
    reason: str | None = None
    error: str | None = None
    pid: int | None = None
    pid_start: str | None = None
    host: str | None = None
    worker: str | None = None
    heartbeat_at: str | None = None
    stop_request: str | None = None
    task_id: str | None = None
    parent_run_id: str | None = None
    parent_run: str | None = None
    not_before: str | None = None
    output_path: str | None = None

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> RunRow:
        names = {f.name for f in fields(cls)}
        data = {k: row[k] for k in row.keys() if k in names}  # noqa: SIM118 - sqlite3.Row has keys(), not iteration by name
        data["status"] = RunStatus(data["status"])
        data["trigger"] = Trigger(data["trigger"])
        return cls(**data)

    @property
    def active(self) -> bool:
        return self.status in ACTIVE


def get(store: Store, run_id: str) -> RunRow | None:
    """The row of ``run_id`` (exact id), typed."""
    row = store.one("SELECT * FROM runs WHERE id=?", (run_id,))
    return None if row is None else RunRow.of(row)


def new_run_id(now: datetime | None = None) -> str:
    stamp = (now or utcnow()).astimezone(UTC).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{secrets.token_hex(3)}"


# -- opening a run ---------------------------------------------------------------------------


def open_run(
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
    reason: str | None = None,
    error: str | None = None,
) -> str:
    """Insert the ledger row: ``running`` (this process runs it now), ``queued`` (a worker will),
    or a final status with its ``reason`` (a slot skipped or missed: the row is its record).
    Raise sqlite3.IntegrityError if (job, slot, attempt) exists, or if the ``run_id`` given is taken
    (a generated one that is taken is drawn again). ``worker``: the ``runner worker`` that holds
    the row from the start (its heartbeat, from now)."""
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
    elif status in FINAL:
        row.update(ended_at=iso(now), reason=reason, error=error)
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


# -- moving a run along ---------------------------------------------------------------------------


def _move(
    store: Store,
    run_id: str,
    to: RunStatus,
    *,
    sets: Mapping[str, Any],
    where: str = "",
    params: tuple[Any, ...] = (),
    expected: tuple[RunStatus, ...] | None = None,
) -> bool:
    """One guarded status change: ``to`` plus ``sets``, only from the statuses it may come from
    (``expected``, narrowed from ``sources(to)``) and ``where``; True when it won."""
    allowed = sources(to) if expected is None else tuple(s for s in expected if to in LEGAL[s])
    assign = ", ".join(f"{k}=?" for k in sets)
    marks = ", ".join("?" * len(allowed))
    with store.transaction() as conn:
        cur = conn.execute(
            f"UPDATE runs SET status=?{', ' if assign else ''}{assign} WHERE id=? AND status IN ({marks}){where}",
            (to, *sets.values(), run_id, *allowed, *params),
        )
        if cur.rowcount:
            return True
        row = conn.execute("SELECT status FROM runs WHERE id=?", (run_id,)).fetchone()
    if row is not None:
        current = RunStatus(row[0])
        if current not in FINAL and to not in LEGAL[current]:
            _refuse(run_id, current, to)
    return False


def _refuse(run_id: str, current: RunStatus, to: RunStatus) -> None:
    message = f"run {run_id}: the ledger refuses {current} -> {to}"
    if os.environ.get("RUNNER_LEDGER_STRICT"):
        raise IllegalTransition(message)
    import logging  # only on this error path: a replayed run loads no logging (tests/cli/test_import_budget.py)

    logging.getLogger("runner.ledger").error(message)


def start(
    store: Store,
    run_id: str,
    *,
    pid: int | None = None,
    now: datetime | None = None,
    dispatched_at: datetime | None = None,
    waited_s: float | None = None,
) -> bool:
    """The queued row starts: ``running`` with this process's pid; a row serve handed to a worker
    also gets ``dispatched_at`` and ``waited_s`` in the same write. False when it is no longer
    queued (cancelled, or declared lost, before it started)."""
    pid = pid or os.getpid()
    sets: dict[str, Any] = {"started_at": iso(now or utcnow()), "pid": pid, "pid_start": start_time(pid), "host": HOST}
    if dispatched_at is not None:
        sets["dispatched_at"] = iso(dispatched_at)
        if waited_s is not None:
            sets["waited_s"] = waited_s
    return _move(store, run_id, RunStatus.RUNNING, sets=sets, expected=(RunStatus.QUEUED,))


def wait(store: Store, run_id: str) -> bool:
    """``running -> waiting``: the run parked on an approval request (written in the same
    transaction by the caller). False when the run is no longer running (someone else ended it)."""
    return _move(store, run_id, RunStatus.WAITING, sets={}, expected=(RunStatus.RUNNING,))


def resume(store: Store, run_id: str) -> bool:
    """``waiting -> running``: the approval it waited for was answered, expired or cancelled.
    False when the run is not waiting (someone else ended it meanwhile)."""
    return _move(store, run_id, RunStatus.RUNNING, sets={}, expected=(RunStatus.WAITING,))


def finish(
    store: Store,
    run_id: str,
    status: RunStatus,
    *,
    now: datetime | None = None,
    reason: str | None = None,
    error: str | None = None,
    only_from: tuple[RunStatus, ...] | None = None,
    **columns: Any,
) -> bool:
    """The final status, with the run's budget reservation settled at its real cost and an approval
    it was parked on abandoned, in one transaction. False when the run had ended already (its
    first verdict stands: a worker cut off and declared lost whose late result arrives, serve's
    backstop after the worker wrote its own end)."""
    assert status in FINAL, status
    _check_columns(columns)
    sets = {"ended_at": iso(now or utcnow()), "reason": reason, "error": error, **columns}
    with store.transaction():
        won = _move(store, run_id, status, sets=sets, expected=only_from)
        if won:
            settle(store, run_id, now=now)
            abandon(store, run_id, now=now)  # an approval it was parked on is answered by nobody now
    return won


def declare_lost(store: Store, run_id: str, *, error: str, now: datetime | None = None, stale_before: str | None = None) -> bool:
    """A run whose worker is gone (no heartbeat since ``stale_before``, or its process is dead)
    ends ``unknown`` (``worker_lost``); the retry policy takes over. Its worker, if it comes back,
    is refused when it tries to record an end (``finish`` returns False)."""
    where, params = ("", ()) if stale_before is None else (" AND heartbeat_at < ?", (stale_before,))
    sets = {"ended_at": iso(now or utcnow()), "reason": Reason.WORKER_LOST, "error": error}
    with store.transaction():
        won = _move(store, run_id, RunStatus.UNKNOWN, sets=sets, where=where, params=params)
        if won:
            abandon(store, run_id, now=now)
            settle(store, run_id, now=now)  # what it spent (its events) is counted; its reservation is released
    return won


def lose_task_runs(store: Store, task_id: str, *, error: str, now: datetime | None = None) -> list[str]:
    """The board reclaimed kanban task ``task_id`` (its lease ran out): the attempt's runs still
    active end ``unknown`` (``worker_lost``) now, so the lease and the ledger give one verdict and
    the task's next attempt finds the run lost (and resumes it). Returns the ids this call ended."""
    rows = store.query(f"SELECT id FROM runs WHERE task_id=? AND status IN ({_ACTIVE_MARKS})", (task_id, *ACTIVE))
    return [r["id"] for r in rows if declare_lost(store, r["id"], error=error, now=now)]


@dataclass(frozen=True)
class Progress:
    """What a live run has spent so far (its own turns; its tokens and cost include the subagents
    that ended)."""

    turns: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cost_usd: float


def progress(store: Store, run_id: str, spent: Progress) -> bool:
    """Write a live run's counters (after each model reply): only while the run is active, so a
    late write never changes a row that has ended; the run's final write sets them once more.
    False when the run is not active."""
    marks = ", ".join("?" * len(ACTIVE))
    with store.transaction() as conn:
        cur = conn.execute(
            "UPDATE runs SET iterations=?, prompt_tokens=?, completion_tokens=?, cached_tokens=?, cost_usd=? "
            f"WHERE id=? AND status IN ({marks})",
            (
                spent.turns,
                spent.prompt_tokens,
                spent.completion_tokens,
                spent.cached_tokens,
                round(spent.cost_usd, 6),
                run_id,
                *ACTIVE,
            ),
        )
    return bool(cur.rowcount)


def set_fields(store: Store, run_id: str, **columns: Any) -> None:
    """Columns besides the status (model, tokens, cost, output path, delivery, not_before)."""
    if not columns:
        return
    _check_columns(columns)
    sets = ", ".join(f"{k}=:{k}" for k in columns)
    with store.transaction() as conn:
        conn.execute(f"UPDATE runs SET {sets} WHERE id=:_id", {**columns, "_id": run_id})


def _check_columns(columns: Mapping[str, Any]) -> None:
    bad = STATUS_COLUMNS.intersection(columns)
    if bad:
        raise IllegalTransition(f"the status columns ({', '.join(sorted(bad))}) change through the ledger's operations")


# -- workers -------------------------------------------------------------------------------------


def claim_for_worker(store: Store, run_id: str, worker: str, *, now: datetime | None = None) -> RunRow | None:
    """A ``runner worker`` takes a queued row no worker holds: the row is then its (heartbeat from
    now); None when another worker took it or it ended (the message was a duplicate)."""
    with store.transaction() as conn:
        cur = conn.execute(
            "UPDATE runs SET worker=?, heartbeat_at=? WHERE id=? AND status=? AND worker IS NULL",
            (worker, iso(now or utcnow()), run_id, RunStatus.QUEUED),
        )
        if cur.rowcount != 1:
            return None
        row = conn.execute("SELECT * FROM runs WHERE id=?", (run_id,)).fetchone()
    return RunRow.of(row)


def heartbeat(store: Store, worker: str, run_ids: list[str], *, now: datetime | None = None) -> None:
    """The heartbeat of the active runs ``worker`` holds."""
    if not run_ids:
        return
    marks = ", ".join("?" * len(run_ids))
    with store.transaction() as conn:
        conn.execute(
            f"UPDATE runs SET heartbeat_at=? WHERE worker=? AND status IN ({_ACTIVE_MARKS}) AND id IN ({marks})",
            (iso(now or utcnow()), worker, *ACTIVE, *run_ids),
        )


def lost_among(store: Store, run_ids: list[str]) -> list[str]:
    """Which of ``run_ids`` were declared lost (a worker's fence: it kills them at once)."""
    if not run_ids:
        return []
    marks = ", ".join("?" * len(run_ids))
    rows = store.query(
        f"SELECT id FROM runs WHERE id IN ({marks}) AND status=? AND reason=?",
        (*run_ids, RunStatus.UNKNOWN, Reason.WORKER_LOST),
    )
    return [r["id"] for r in rows]


STOP_WHY = frozenset({"timeout", "shutdown", "replaced"})  # a stop request that says why (the run's end says so too)


def request_stop(store: Store, run_id: str, how: str) -> bool:
    """Ask whoever runs ``run_id`` to stop it: ``kill`` (at once), ``term`` (finish the step), or
    why, which is a ``term`` the run's own end then reports (``timeout``, ``shutdown``,
    ``replaced``: see ``stop_outcome``). A ``term`` keeps a why written before it. False when the
    run is not active."""
    value = "COALESCE(stop_request, ?)" if how == "term" else "?"
    with store.transaction() as conn:
        cur = conn.execute(
            f"UPDATE runs SET stop_request={value} WHERE id=? AND status IN ({_ACTIVE_MARKS})",
            (how, run_id, *ACTIVE),
        )
    return bool(cur.rowcount)


def stop_reason(store: Store, run_id: str) -> str | None:
    """Why the run's supervisor stopped it (a ``STOP_WHY`` word), if it did."""
    row = store.one("SELECT stop_request FROM runs WHERE id=?", (run_id,))
    why = row["stop_request"] if row else None
    return why if why in STOP_WHY else None


def stop_outcome(why: str, timeout_s: float | None) -> tuple[RunStatus, Reason, str]:
    """The end a run stopped by its supervisor for ``why`` records (by itself, or by the
    supervisor when the run could not)."""
    if why == "timeout":
        limit = format_duration(timeout_s) if timeout_s else "its limit"
        return RunStatus.TIMED_OUT, Reason.TIMEOUT, f"stopped by serve after the job's timeout of {limit}"
    if why == "replaced":
        return RunStatus.INTERRUPTED, Reason.REPLACED, "a newer slot replaced it while it was running"
    return RunStatus.INTERRUPTED, Reason.SHUTDOWN, "serve stopped while it was running"


REFUSABLE = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.INTERRUPTED)


def refuse_result(store: Store, run_id: str, *, error: str) -> bool:
    """A kanban attempt fenced out by a newer claim (its work may not land) is recorded ``failed``
    (``refused``), whatever end its own process wrote (it may have succeeded, or stopped when it
    saw the claim gone). The one move out of a final status the ledger allows: from an end the
    run wrote itself (never from ``unknown``, another process's verdict), for this reason only."""
    marks = ", ".join("?" * len(REFUSABLE))
    with store.transaction() as conn:
        cur = conn.execute(
            f"UPDATE runs SET status=?, reason=?, error=? WHERE id=? AND status IN ({marks})",
            (RunStatus.FAILED, Reason.REFUSED, error, run_id, *REFUSABLE),
        )
    return bool(cur.rowcount)


def stop_requests(store: Store, worker: str) -> dict[str, str]:
    """The stop requests for the active runs ``worker`` holds."""
    rows = store.query(
        f"SELECT id, stop_request FROM runs WHERE worker=? AND stop_request IS NOT NULL AND status IN ({_ACTIVE_MARKS})",
        (worker, *ACTIVE),
    )
    return {r["id"]: r["stop_request"] for r in rows}


def drop_unclaimed(store: Store, run_id: str, *, marker: str = NOT_TAKEN, now: datetime | None = None) -> bool:
    """A queued run no worker took yet ends ``interrupted`` (``not_started``) and is never started:
    ``marker`` takes the worker column so no later claim can win it."""
    when = iso(now or utcnow())
    sets = {"ended_at": when, "worker": marker, "reason": Reason.NOT_STARTED, "error": "stopped before a worker took it"}
    with store.transaction():
        won = _move(store, run_id, RunStatus.INTERRUPTED, sets=sets, where=" AND worker IS NULL", expected=(RunStatus.QUEUED,))
        if won:
            settle(store, run_id)
    return won


# -- lost workers: the one recovery ------------------------------------------------------------------


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return f"the worker was killed by signal {name} before recording a final status"
    return f"the worker exited with code {code} before recording a final status"


def supervisor_end(
    store: Store, run_id: str, code: int, *, why: str | None, timeout_s: float | None, sweep: bool = True
) -> tuple[bool, RunStatus, Reason, str]:
    """A run's process exited (``code``) without recording its end; its supervisor (serve's pool,
    a ``runner worker``) records it: what stopping it for ``why`` means (``stop_outcome``: a run
    killed after its timeout ends ``timed_out``) when it asked the run to stop, else ``failed``
    (``worker_died``). Returns whether this call ended the row (False: it had ended already) and
    the end it meant to record."""
    if why in STOP_WHY:
        status, reason, error = stop_outcome(why, timeout_s)
        won = finish(store, run_id, status, reason=reason, error=error)
        if won and sweep:
            kill_leftovers(run_id)
        return won, status, reason, error
    return worker_died(store, run_id, code, sweep=sweep), RunStatus.FAILED, Reason.WORKER_DIED, describe_exit(code)


def worker_died(store: Store, run_id: str, code: int, *, sweep: bool = True) -> bool:
    """A worker exited (``code``) without recording its run's end: the run ends ``failed``
    (``worker_died``) if it is still active, and (``sweep``: its commands ran on this machine) what
    they left running is killed. False: the run had ended already."""
    won = finish(store, run_id, RunStatus.FAILED, reason=Reason.WORKER_DIED, error=describe_exit(code))
    if won and sweep:
        kill_leftovers(run_id)  # its commands (own sessions, marked) would go on unsupervised
    return won


def recover_stale(store: Store, *, now: datetime, lost_after_s: float) -> list[str]:
    """Runs held by a ``runner worker`` whose heartbeat is older than ``lost_after_s`` end
    ``unknown`` (``worker_lost``); return their ids (each changed by one guarded UPDATE, so two
    serves, a leader and a late one, never both recover it)."""
    cutoff = iso(now - timedelta(seconds=lost_after_s)) or ""
    rows = store.query(
        f"SELECT id, worker, heartbeat_at FROM runs WHERE status IN ({_ACTIVE_MARKS}) AND worker IS NOT NULL "
        "AND worker != ? AND heartbeat_at < ?",
        (*ACTIVE, NOT_TAKEN, cutoff),
    )
    return [
        r["id"]
        for r in rows
        if declare_lost(
            store,
            r["id"],
            error=f"worker {r['worker']} stopped sending heartbeats (last at {r['heartbeat_at']})",
            now=now,
            stale_before=cutoff,
        )
    ]



def recover_orphans(store: Store) -> list[str]:
    """Rows left ``running`` (or ``waiting`` on an approval, which ``declare_lost`` abandons) on this
    host by a process that is gone become ``unknown``, and what
    each such run left running is killed (its commands carry the run's mark in their environment);
    return the ids this call changed (each is changed by exactly one process, so each is alerted
    and swept once)."""
    rows = store.query(f"SELECT id, pid, pid_start FROM runs WHERE status IN ({_STARTED_MARKS}) AND host=?", (*STARTED, HOST))
    dead = [r["id"] for r in rows if not r["pid"] or not pid_alive(int(r["pid"]), r["pid_start"])]
    changed = [
        run_id
        for run_id in dead
        if declare_lost(store, run_id, error="the worker process disappeared before recording a final status")
    ]
    for run_id in changed:
        kill_leftovers(run_id)
    return changed


def kill_leftovers(run_id: str) -> int:
    """SIGKILL this user's processes started by run ``run_id``'s commands (``RUNNER_RUN_MARK`` is
    ``<run id>-<nonce>``), also those that left its process tree (``setsid``, double fork); the run's
    own process is gone already (that is why it is being recovered). Returns how many."""
    return kill_marked(RUN_MARK, f"{run_id}-", prefix=True)


# -- reads the supervisors make ----------------------------------------------------------------------


def is_active(store: Store, run_id: str) -> bool:
    """Whether ``run_id`` is queued, running or waiting (a container or process of it may still be needed)."""
    row = store.one("SELECT status FROM runs WHERE id=?", (run_id,))
    return bool(row and row["status"] in ACTIVE)


def queued_to_adopt(store: Store, triggers: tuple[Trigger, ...]) -> list[RunRow]:
    """Rows a previous serve left ``queued`` (pending retries, fires and triggers it had not started),
    oldest due first."""
    marks = ", ".join("?" * len(triggers))
    rows = store.query(
        f"SELECT * FROM runs WHERE status=? AND trigger IN ({marks}) ORDER BY COALESCE(not_before, slot, created_at)",
        (RunStatus.QUEUED, *triggers),
    )
    return [RunRow.of(r) for r in rows]


def running_on_workers(store: Store, triggers: tuple[Trigger, ...]) -> list[RunRow]:
    """Runs ``runner worker``s are running now, or holding while they wait on an approval (a
    previous leader sent them)."""
    marks = ", ".join("?" * len(triggers))
    rows = store.query(
        f"SELECT * FROM runs WHERE status IN ({_STARTED_MARKS}) AND worker IS NOT NULL AND trigger IN ({marks})",
        (*STARTED, *triggers),
    )
    return [RunRow.of(r) for r in rows]


def rows_of(store: Store, run_ids: list[str]) -> dict[str, RunRow]:
    """The rows of ``run_ids`` that exist, by id (in batches of 500)."""
    out: dict[str, RunRow] = {}
    for i in range(0, len(run_ids), 500):
        chunk = run_ids[i : i + 500]
        marks = ", ".join("?" * len(chunk))
        for row in store.query(f"SELECT * FROM runs WHERE id IN ({marks})", chunk):
            out[row["id"]] = RunRow.of(row)
    return out


def running_here(store: Store, triggers: tuple[Trigger, ...]) -> list[RunRow]:
    """Runs running (or waiting on an approval) on this host in a process of their own (no
    ``runner worker`` holds them)."""
    marks = ", ".join("?" * len(triggers))
    rows = store.query(
        f"SELECT * FROM runs WHERE status IN ({_STARTED_MARKS}) AND host=? AND worker IS NULL AND pid IS NOT NULL "
        f"AND trigger IN ({marks})",
        (*STARTED, HOST, *triggers),
    )
    return [RunRow.of(r) for r in rows]


def running_ids(store: Store) -> set[str]:
    """Runs a process holds now (running, or waiting on an approval: either may change the jobs)."""
    return {r["id"] for r in store.query(f"SELECT id FROM runs WHERE status IN ({_STARTED_MARKS})", tuple(STARTED))}


def activity(store: Store) -> tuple[int, str | None]:
    """(runs active now: queued, running or waiting on an approval; when the last run ended) for
    the Curator's idle check."""
    marks = ",".join("?" * len(ACTIVE))
    active = store.one(f"SELECT COUNT(*) AS n FROM runs WHERE status IN ({marks})", tuple(ACTIVE))
    ended = store.one("SELECT MAX(ended_at) AS t FROM runs")
    return (int(active["n"]) if active else 0), (ended["t"] if ended else None)


# -- a run's own fence ----------------------------------------------------------------------------------


def fenced_out(store: Store, run_id: str) -> RunRow | None:
    """The row, when the run may no longer act as its owner: someone else ended it (declared it
    lost, cancelled it before it ran, recorded its end); None while it is still this run's to finish."""
    row = get(store, run_id)
    return row if row is not None and row.status in FINAL else None


def status_on(conn: Any, run_id: str) -> RunStatus | None:
    """The status of ``run_id`` read on a connection of its own (the cancel watcher's)."""
    row = conn.execute("SELECT status FROM runs WHERE id=?", (run_id,)).fetchone()
    return None if row is None else RunStatus(row[0])
