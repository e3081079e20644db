"""The journal of a run's completed steps and the side effects done under a key (m0026): every SQL
statement on ``run_journal`` and ``step_keys``.

Entries are keyed by the run's first attempt (``root``): every attempt of one run writes and reads
the same journal. A write joins the caller's transaction, so an entry and the ledger event that
tells of the same step are one write (``runner.run.journal.Journal``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from runner.clock import iso, utcnow
from runner.events import Event
from runner.statuses import RunStatus
from runner.store import Store, dumps
from runner.store.ledger import Reason, RunRow

TURN = ""  # the call_id of a model turn's own entry (its answer); turn 0 holds the first messages
STEERS = "~steers"  # the call_id of the messages (steering) given to the model before turn N's request


class StepState(StrEnum):
    STARTED = "started"  # a tool call was announced; no result was written (yet)
    DONE = "done"


@dataclass(frozen=True)
class Entry:
    turn: int
    call_id: str
    state: StepState
    run_id: str
    messages: int
    body: Any


def key_of(store: Store, run_id: str) -> str:
    """The journal an attempt wrote to: the one it resumed (the attempt that started it afresh),
    else its own id. An attempt that resumed and was lost before it journaled a step of its own
    is known by its ``resumed`` event (which names the journal), so a third attempt still resumes
    the run's journal."""
    row = store.one("SELECT root_run FROM run_journal WHERE run_id=? LIMIT 1", (run_id,))
    if row:
        return str(row["root_run"])
    ev = store.one(
        "SELECT payload FROM run_events WHERE run_id=? AND kind=? ORDER BY seq LIMIT 1", (run_id, Event.RESUMED)
    )
    journal = json.loads(ev["payload"]).get("journal") if ev else None
    return str(journal) if journal else run_id


def entries(store: Store, root: str) -> list[Entry]:
    """The journal of ``root``, in step order (turn, then the model's answer before its calls)."""
    rows = store.query(
        "SELECT turn, call_id, state, run_id, messages, body FROM run_journal WHERE root_run=? ORDER BY turn, call_id",
        (root,),
    )
    return [
        Entry(int(r["turn"]), r["call_id"], StepState(r["state"]), r["run_id"], int(r["messages"]), json.loads(r["body"]))
        for r in rows
    ]


def write(
    store: Store, root: str, run_id: str, turn: int, call_id: str, state: StepState, body: Any, *, messages: int = 0
) -> None:
    """Write one entry (a later state of the same step replaces the earlier); joins the caller's
    transaction."""
    with store.transaction() as conn:
        conn.execute(
            "INSERT OR REPLACE INTO run_journal (root_run, turn, call_id, state, run_id, messages, body, written_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (root, turn, call_id, state, run_id, messages, dumps(body), iso(utcnow())),
        )


# -- attempts ---------------------------------------------------------------------------------------

#: how an attempt that may be resumed ended: its worker was lost or died, or it was interrupted
LOST_REASONS = frozenset({Reason.WORKER_LOST, Reason.WORKER_DIED})


def lost(row: RunRow) -> bool:
    """Whether the attempt ended because its worker was lost (the case serve resumes by itself)."""
    return row.status == RunStatus.UNKNOWN or (row.status == RunStatus.FAILED and row.reason in LOST_REASONS)


def resumable(row: RunRow) -> bool:
    """Whether ``runner runs resume`` may resume the attempt: lost, unknown or interrupted."""
    return lost(row) or row.status == RunStatus.INTERRUPTED


def attempts(store: Store, root: str) -> list[RunRow]:
    """Every attempt of the run ``root`` (itself first), by attempt number."""
    rows = store.query(
        "SELECT * FROM runs WHERE id=? OR parent_run=? ORDER BY attempt, created_at", (root, root)
    )
    return [RunRow.of(r) for r in rows]


def lost_task_attempt(store: Store, task_id: str, *, besides: str | None = None) -> RunRow | None:
    """The last run of kanban task ``task_id`` (other than ``besides``, the row a ``runner worker``
    made for the attempt starting now) when it ended because its worker was lost: the task's next
    attempt resumes it. None when the last run ended otherwise, or is not ended yet."""
    row = store.one(
        "SELECT * FROM runs WHERE task_id=? AND id<>? AND parent_run_id IS NULL ORDER BY created_at DESC, id DESC LIMIT 1",
        (task_id, besides or ""),
    )
    if row is None:
        return None
    run = RunRow.of(row)
    return run if lost(run) else None


def previous(store: Store, row: RunRow) -> RunRow | None:
    """The attempt before ``row`` (None for a first attempt)."""
    if row.parent_run is None:
        return None
    earlier = [r for r in attempts(store, row.parent_run) if r.attempt < row.attempt and r.id != row.id]
    return earlier[-1] if earlier else None


# -- side effects under a key -------------------------------------------------------------------------


def done(store: Store, key: str) -> bool:
    """Whether a side effect under ``key`` was done already (by any attempt)."""
    return store.one("SELECT 1 AS x FROM step_keys WHERE key=?", (key,)) is not None


def mark_done(store: Store, key: str, *, root: str, run_id: str, what: str) -> None:
    """Record the side effect under ``key`` as done (the first attempt to do it keeps the row)."""
    with store.transaction() as conn:
        conn.execute(
            "INSERT OR IGNORE INTO step_keys (key, root_run, run_id, what, done_at) VALUES (?, ?, ?, ?, ?)",
            (key, root, run_id, what, iso(utcnow())),
        )
