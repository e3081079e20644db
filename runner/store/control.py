"""Live control of runs through the store, both sides of it.

The asking side is what ``runner jobs trigger``, ``runner runs cancel``, ``runner runs say``,
``runner kanban retry | comment``, ``runner approvals pending | grant | deny`` and the web
dashboard's buttons call. Nothing here talks
to a process: each call writes a row to runner.db and returns. The acting side reads those rows
(the control tables of migration m0014): serve's schedule ticker takes trigger requests (also those
written while it was down, at its start); a running run's cancel watch (``runner.run.cancel``) sees
its cancel request and the messages sent to it (steering, m0023); a run parked on an approval (``runner.safety.parked``) writes its request and
waits for the answer. So control works without a socket and survives a serve restart. None of the
asking is done for a process that is part of a run (``runner.safety.inside``): a run cannot answer
its own approval. ``by`` names who asked: ``user@host`` from the CLI (``whoami``), the token's name
from the web."""

from __future__ import annotations

import getpass
import json
import re
import secrets
import socket
import time
from collections.abc import Mapping, Sequence, Set
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from runner.clock import iso, utcnow
from runner.errors import UsageError
from runner.events import Steer
from runner.safety.inside import refuse_inside_run, run_of
from runner.statuses import ACTIVE, STARTED, ApprovalState, ControlKind, RunStatus, TaskStatus
from runner.store import Store
from runner.store.board import Board
from runner.store.runs import get_run
from runner.store.tasks import TaskNotFound


def new_id(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(4)}"


#: template variables a trigger carries, as (key, value) pairs sorted by key: a frozen dataclass
#: (``Fire``) holds them and the pickled ``WorkerSpec`` takes them to the worker
Vars = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class TriggerRequest:
    """A ``runner jobs trigger`` (or a webhook's run, ``run_id`` set: its ``queued`` row is
    written already, ``runner.store.hooks``) serve has not handled yet."""

    id: str
    job: str
    requested_by: str
    requested_at: str
    run_id: str | None = None
    vars: Vars = ()  # the template variables it overrides (``--var``), as ``run-job --var`` does


def _vars(text: str | None) -> Vars:
    return tuple(sorted((str(k), str(v)) for k, v in json.loads(text or "{}").items()))


def open_triggers(store: Store) -> list[TriggerRequest]:
    """Trigger requests not handled yet, oldest first."""
    rows = store.query(
        "SELECT id, job, requested_by, requested_at, run_id, vars FROM control_requests "
        "WHERE kind=? AND handled_at IS NULL ORDER BY requested_at, id",
        (ControlKind.TRIGGER,),
    )
    return [
        TriggerRequest(r["id"], r["job"], r["requested_by"], r["requested_at"], r["run_id"], _vars(r["vars"]))
        for r in rows
    ]


def trigger_vars_of(store: Store, run_id: str) -> Vars:
    """The template variables of the trigger request that opened run ``run_id`` (the first
    attempt's id: a retry runs with its first attempt's), () when none did or it had none: a
    queued row adopted by a new serve, or taken by a ``runner worker``, runs with them too."""
    row = store.one(  # kind spelled out: the partial index of m0029 is used
        "SELECT vars FROM control_requests WHERE outcome=? AND kind='trigger' AND vars IS NOT NULL", (run_id,)
    )
    return _vars(row["vars"]) if row else ()


def mark_handled(store: Store, request_id: str, outcome: str, *, now: datetime | None = None) -> bool:
    """Record that ``request_id`` was acted on (``outcome``: the run id, or why not); False when
    another process handled it first. Call inside the transaction that acts on it."""
    cur = store.execute(
        "UPDATE control_requests SET handled_at=?, outcome=? WHERE id=? AND handled_at IS NULL",
        (iso(now or utcnow()), outcome, request_id),
    )
    return cur.rowcount == 1


@dataclass(frozen=True)
class TriggerOutcome:
    """What became of a trigger request: ``handled`` (serve acted on it), ``outcome`` (the run id
    it opened, or why not), ``run_id`` (None until serve opened one, or when it did not)."""

    request_id: str
    job: str
    handled: bool
    outcome: str | None
    run_id: str | None


def trigger_outcome(store: Store, request_id: str) -> TriggerOutcome | None:
    """The state of trigger request ``request_id`` (None: no such request)."""
    row = store.one(
        "SELECT c.job, c.handled_at, c.outcome, r.id AS run_id FROM control_requests c "
        "LEFT JOIN runs r ON r.id = c.outcome WHERE c.id=? AND c.kind=?",
        (request_id, ControlKind.TRIGGER),
    )
    if row is None:
        return None
    return TriggerOutcome(request_id, row["job"], row["handled_at"] is not None, row["outcome"], row["run_id"])


def queued_cancels(store: Store) -> list[tuple[str, str, str]]:
    """(request id, run id, requested by) of cancel requests whose run is still ``queued``."""
    rows = store.query(
        "SELECT c.id, c.run_id, c.requested_by FROM control_requests c JOIN runs r ON r.id = c.run_id "
        "WHERE c.kind=? AND c.handled_at IS NULL AND r.status='queued'",
        (ControlKind.CANCEL,),
    )
    return [(r["id"], r["run_id"], r["requested_by"]) for r in rows]


def run_requests(conn: Any, run_id: str, *, seen: Set[str] = frozenset()) -> tuple[str | None, list[Steer]]:
    """What was asked of run ``run_id``, read on a run's watch connection (``runner.run.cancel``)
    in one indexed query: who asked to cancel it (the first request; None), and the messages sent
    to it not handled yet and not in ``seen``, oldest first."""
    rows = conn.execute(
        "SELECT id, kind, requested_by, message FROM control_requests WHERE run_id=? "
        "AND (kind=? OR (kind=? AND handled_at IS NULL)) ORDER BY requested_at, id",
        (run_id, ControlKind.CANCEL, ControlKind.STEER),
    ).fetchall()
    cancel = next((str(r[2]) for r in rows if r[1] == ControlKind.CANCEL), None)
    steers = [Steer(str(r[0]), str(r[2]), str(r[3] or "")) for r in rows if r[1] == ControlKind.STEER]
    return cancel, [s for s in steers if s.request_id not in seen]


def settle_steers(store: Store, run_id: str, delivered: Sequence[str], *, now: datetime) -> None:
    """The run is ending (call inside the transaction that records its final status): the
    messages its model was given are handled ``delivered``; any other sent to it (arrived after
    its last model request, or too late for its watch to see) ``undelivered``. A message written
    after that transaction finds the run ended and is refused (``request_steer``)."""
    stamp = iso(now)
    for request_id in delivered:  # a resumed attempt's replayed ones too, which the lost attempt's end left undelivered
        store.execute(
            "UPDATE control_requests SET handled_at=?, outcome=? WHERE id=? AND (handled_at IS NULL OR outcome=?)",
            (stamp, STEER_DELIVERED, request_id, STEER_UNDELIVERED),
        )
    store.execute(
        "UPDATE control_requests SET handled_at=?, outcome=? WHERE run_id=? AND kind=? AND handled_at IS NULL",
        (stamp, STEER_UNDELIVERED, run_id, ControlKind.STEER),
    )


def steers_of(store: Store, run_id: str) -> list[dict[str, Any]]:
    """The messages sent to run ``run_id``, oldest first: id, requested_by, requested_at, message,
    handled_at, outcome."""
    return store.query(
        "SELECT id, requested_by, requested_at, message, handled_at, outcome FROM control_requests "
        "WHERE run_id=? AND kind=? ORDER BY requested_at, id",
        (run_id, ControlKind.STEER),
    )


def cancel_requested(store: Store, run_id: str) -> str | None:
    """Who asked to cancel ``run_id`` (the first request), or None."""
    row = store.one(
        "SELECT requested_by FROM control_requests WHERE run_id=? AND kind=? ORDER BY requested_at LIMIT 1",
        (run_id, ControlKind.CANCEL),
    )
    return str(row["requested_by"]) if row else None


@dataclass(frozen=True)
class ApprovalRequest:
    """A parked approval as stored (command redacted)."""

    id: str
    run_id: str
    job: str
    command: str
    reasons: tuple[str, ...]
    requested_at: str
    expires_at: str
    status: ApprovalState
    decided_by: str | None = None
    decided_at: str | None = None
    reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``runner approvals pending --json`` (the decision fields stay null while pending)."""
        return {**asdict(self), "reasons": list(self.reasons), "status": str(self.status)}

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> ApprovalRequest:
        reasons = tuple(str(x) for x in json.loads(row["reasons"] or "[]"))
        return cls(
            row["id"],
            row["run_id"],
            row["job"],
            row["command"],
            reasons,
            row["requested_at"],
            row["expires_at"],
            ApprovalState(row["status"]),
            row["decided_by"],
            row["decided_at"],
            row["reason"],
        )


def park(
    store: Store, *, run_id: str, job: str, command: str, reasons: tuple[str, ...], now: datetime, expires: datetime
) -> ApprovalRequest:
    """Store a pending approval request (``command`` already redacted)."""
    request_id = new_id("a")
    with store.transaction() as conn:
        conn.execute(
            "INSERT INTO approval_requests (id, run_id, job, command, reasons, requested_at, expires_at, status) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                request_id,
                run_id,
                job,
                command,
                json.dumps(list(reasons)),
                iso(now),
                iso(expires),
                ApprovalState.PENDING,
            ),
        )
    return get_request(store, request_id)


def get_request(store: Store, request_id: str) -> ApprovalRequest:
    row = store.one("SELECT * FROM approval_requests WHERE id=?", (request_id,))
    assert row is not None, request_id
    return ApprovalRequest.from_row(row)


def close_request(
    store: Store, request_id: str, state: ApprovalState, *, by: str, reason: str, now: datetime | None = None
) -> ApprovalRequest:
    """End a still-pending request from the waiting side (expired, cancelled); an answer that
    came first wins. Returns the request as it now stands."""
    with store.transaction() as conn:
        conn.execute(
            "UPDATE approval_requests SET status=?, decided_by=?, decided_at=?, reason=? WHERE id=? AND status=?",
            (state, by, iso(now or utcnow()), reason, request_id, ApprovalState.PENDING),
        )
    return get_request(store, request_id)


def waiting_on(store: Store, run_id: str) -> ApprovalRequest | None:
    """The approval ``run_id`` is parked on right now, or None."""
    row = store.one(
        "SELECT * FROM approval_requests WHERE run_id=? AND status=? ORDER BY requested_at DESC LIMIT 1",
        (run_id, ApprovalState.PENDING),
    )
    return ApprovalRequest.from_row(row) if row else None


def abandon(store: Store, run_id: str, *, now: datetime | None = None) -> int:
    """A run that ended (killed, lost) leaves no request pending: its approval requests become
    ``abandoned`` (the count is returned), the messages sent to it that nobody settled
    ``undelivered`` (a run declared lost never settles its own)."""
    stamp = now or utcnow()
    cur = store.execute(
        "UPDATE approval_requests SET status=?, decided_at=? WHERE run_id=? AND status=?",
        (ApprovalState.ABANDONED, iso(stamp), run_id, ApprovalState.PENDING),
    )
    settle_steers(store, run_id, (), now=stamp)
    return cur.rowcount


def pending_approvals(store: Store) -> list[ApprovalRequest]:
    """Approvals runs are parked on now, oldest first (a run that ended meanwhile is not listed;
    the run is ``waiting``)."""
    marks = ", ".join("?" * len(STARTED))
    rows = store.query(
        "SELECT a.* FROM approval_requests a JOIN runs r ON r.id = a.run_id "
        f"WHERE a.status=? AND r.status IN ({marks}) ORDER BY a.requested_at, a.id",
        (ApprovalState.PENDING, *STARTED),
    )
    return [ApprovalRequest.from_row(r) for r in rows]


@dataclass(frozen=True)
class Answered:
    """What answering an approval did: ``found``; ``was``: its state before; ``run_status``: its run's
    (a run that ended without seeing an answer makes a pending request ``abandoned``, not answered)."""

    found: bool
    was: ApprovalState | None = None
    run_id: str | None = None
    run_status: RunStatus | None = None

    @property
    def decided(self) -> bool:
        return self.was is ApprovalState.PENDING and self.run_status in STARTED


def answer(
    store: Store, approval_id: str, *, granted: bool, by: str, reason: str | None, stamp: str | None
) -> Answered:
    """Grant or deny a pending approval whose run still runs (it is ``waiting``; the run moves
    itself back to ``running`` through the ledger when it sees the answer), in one transaction."""
    with store.transaction() as conn:
        row = conn.execute(
            "SELECT a.status, a.run_id, r.status AS run_status FROM approval_requests a "
            "LEFT JOIN runs r ON r.id = a.run_id WHERE a.id=?",
            (approval_id,),
        ).fetchone()
        if row is None:
            return Answered(False)
        run_status = RunStatus(row["run_status"]) if row["run_status"] else None
        answered = Answered(True, ApprovalState(row["status"]), row["run_id"], run_status)
        if answered.was is not ApprovalState.PENDING:
            return answered
        if not answered.decided:
            conn.execute(
                "UPDATE approval_requests SET status=?, decided_at=? WHERE id=?",
                (ApprovalState.ABANDONED, stamp, approval_id),
            )
        else:
            state = ApprovalState.GRANTED if granted else ApprovalState.DENIED
            conn.execute(
                "UPDATE approval_requests SET status=?, decided_by=?, decided_at=?, reason=? WHERE id=?",
                (state, by, stamp, reason, approval_id),
            )
    return answered


# -- the asking side (CLI, web) ------------------------------------------------------------------------
class ControlRefused(UsageError):
    """A control request that cannot be done as asked (exit 2, one line); ``reason`` says why:
    ``not_found``, ``not_running``, ``already_decided``, ``not_retryable``."""

    reason = "controlrefused"  # each instance names its own (as ``ModelError`` does)

    def __init__(self, message: str, *, reason: str):
        super().__init__(message)
        self.reason = reason


def whoami() -> str:
    """``user@host``: who asked, as the audit records it for CLI requests."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


# -- triggers ------------------------------------------------------------------------------------
#: the most template variables one trigger carries, and the longest value (characters)
TRIGGER_VARS_MAX = 20
TRIGGER_VAR_CHARS = 4000
VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")  # a template variable name: vars.NAME


def trigger_vars(given: Mapping[str, Any]) -> Vars:
    """The template variables a trigger carries, checked: ``UsageError`` (exit 2, one line) for
    more than ``TRIGGER_VARS_MAX``, a key that is not a template variable name (``VAR_NAME``), a
    value that is not a string, longer than ``TRIGGER_VAR_CHARS`` or holding a NUL character."""
    if len(given) > TRIGGER_VARS_MAX:
        raise UsageError(f"{len(given)} vars given; the limit is {TRIGGER_VARS_MAX}")
    for key, value in given.items():
        shown = repr(key)[:70]
        if not isinstance(key, str) or not VAR_NAME.match(key):
            raise UsageError(f"var {shown}: not a template variable name (letters, digits, _; not a digit first)")
        if not isinstance(value, str):
            raise UsageError(f"var {shown}: the value must be a string, not {type(value).__name__}")
        if len(value) > TRIGGER_VAR_CHARS:
            raise UsageError(f"var {shown}: the value is {len(value):,} characters; the limit is {TRIGGER_VAR_CHARS:,}")
        if "\x00" in value:
            raise UsageError(f"var {shown}: the value holds a NUL character")
    return tuple(sorted(given.items()))


def request_trigger(
    store: Store, job: str, *, by: str, vars: Mapping[str, Any] | None = None, now: datetime | None = None
) -> str:
    """Ask serve to run ``job`` now (trigger ``manual``, through its pool and policies); return the
    request id. ``vars`` override the job's template variables as ``run-job --var`` does (checked:
    ``trigger_vars``; stored with the request, JSON). The caller checks that the job exists (serve
    records an unknown one as handled with an error)."""
    refuse_inside_run("trigger a job")
    pairs = trigger_vars(vars or {})
    stored = json.dumps(dict(pairs), ensure_ascii=False) if pairs else None
    request_id = new_id("t")
    with store.transaction() as conn:
        conn.execute(
            "INSERT INTO control_requests (id, kind, job, requested_by, requested_at, vars) VALUES (?, ?, ?, ?, ?, ?)",
            (request_id, ControlKind.TRIGGER, job, by, iso(now or utcnow()), stored),
        )
    return request_id


# -- cancel --------------------------------------------------------------------------------------
def request_cancel(store: Store, run_id: str, *, by: str, now: datetime | None = None) -> None:
    """Ask run ``run_id`` (an id or a unique part of one) to stop now: its current step is cut
    (``runner.run.cancel``) and it ends ``interrupted`` (reason ``cancelled``), whichever process
    runs it. A run parked on an approval
    stops waiting. Raises ``ControlRefused`` (``not_found`` / ``not_running``; ``subagent`` for a
    delegate_task child, which stops with its parent)."""
    refuse_inside_run("cancel a run")

    row = get_run(store, run_id)
    if row is None:
        raise ControlRefused(f"no run {run_id}; see: runner runs list", reason="not_found")
    if row["status"] not in ACTIVE:
        raise ControlRefused(f"run {row['id']} is {row['status']}, not running", reason="not_running")
    if row.get("parent_run_id"):  # a subagent runs inside its parent's process and stops with it
        parent = row["parent_run_id"]
        raise ControlRefused(f"run {row['id']} is a subagent of run {parent}; cancel that run", reason="subagent")
    with store.transaction() as conn:
        conn.execute(
            "INSERT INTO control_requests (id, kind, job, run_id, requested_by, requested_at) VALUES (?, ?, ?, ?, ?, ?)",
            (new_id("c"), ControlKind.CANCEL, row["job"], row["id"], by, iso(now or utcnow())),
        )


# -- steering ------------------------------------------------------------------------------------
#: the longest message ``request_steer`` takes (characters, after stripping): a steer is a short
#: instruction for the model, not a document (a file the agent can read is the way for that)
STEER_MAX_CHARS = 4000
STEER_DELIVERED = "delivered"
STEER_UNDELIVERED = "undelivered: the run asked the model nothing more after it arrived"


def steer_text(text: str) -> str:
    """The message as sent (stripped); ``UsageError`` (exit 2, one line) when it is empty, longer
    than ``STEER_MAX_CHARS`` or holds a NUL character."""
    message = text.strip()
    if not message:
        raise UsageError("the message is empty")
    if len(message) > STEER_MAX_CHARS:
        raise UsageError(f"the message is {len(message):,} characters; the limit is {STEER_MAX_CHARS:,}")
    if "\x00" in message:
        raise UsageError("the message holds a NUL character")
    return message


def request_steer(store: Store, run_id: str, text: str, *, by: str, now: datetime | None = None) -> str:
    """Send run ``run_id`` (an id or a unique part of one) a message: its process gives the model
    the text as a user message before its next model request (never between a turn's tool calls
    and their results) and records a ``steered`` step; whichever process runs it. Returns the
    request id. Raises ``UsageError`` for a bad text (``steer_text``) and ``ControlRefused``
    (``not_found`` / ``not_running``; ``subagent`` for a delegate_task child: steer its parent)."""
    refuse_inside_run("steer a run")
    message = steer_text(text)
    row = get_run(store, run_id)
    if row is None:
        raise ControlRefused(f"no run {run_id}; see: runner runs list", reason="not_found")
    if row.get("parent_run_id"):  # its loop runs on a thread of its parent, which holds the inbox
        parent = row["parent_run_id"]
        raise ControlRefused(f"run {row['id']} is a subagent of run {parent}; steer that run", reason="subagent")
    request_id = f"s{time.time_ns() // 1000:x}{secrets.token_hex(3)}"  # in sending order within a millisecond
    with store.transaction() as conn:  # checked and written in one write: the run's end sweeps it, or it is refused
        status = conn.execute("SELECT status FROM runs WHERE id=?", (row["id"],)).fetchone()[0]
        if status not in ACTIVE:
            raise ControlRefused(f"run {row['id']} is {status}, not running", reason="not_running")
        conn.execute(
            "INSERT INTO control_requests (id, kind, job, run_id, requested_by, requested_at, message) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (request_id, ControlKind.STEER, row["job"], row["id"], by, iso(now or utcnow()), message),
        )
    return request_id


# -- kanban --------------------------------------------------------------------------------------
COMMENT_HEAD = "A new comment on your kanban task:\n\n"
COMMENT_CUT = "\n[... the comment goes on: kanban_show has it whole]"


@dataclass(frozen=True)
class Commented:
    """What ``comment_task`` did: the comment is stored; ``steered``: the run it was also sent to
    (the task's running attempt); ``why``: why a running task's comment was not sent (None when
    it was, or when the task is not running)."""

    task_id: int
    steered: str | None = None
    why: str | None = None


def comment_task(store: Store, task_id: int, text: str, *, by: str, now: datetime | None = None) -> Commented:
    """Add a comment to task ``task_id`` (``runner kanban comment``, the dashboard's task page);
    when the task is running, its attempt's run also gets the comment as a message
    (``request_steer``), cut to ``STEER_MAX_CHARS`` with a note pointing at ``kanban_show``. From
    inside a run the comment is stored and nothing is sent (a run does not steer runs)."""
    when = now or utcnow()
    board = Board(store)
    try:
        board.comment(task_id, text, now=when, author=by)
        task = board.get(task_id)
    except TaskNotFound as exc:
        raise ControlRefused(str(exc), reason="not_found") from None
    finally:
        board.close()
    if task.status != TaskStatus.RUNNING:
        return Commented(task_id)
    active = sorted(ACTIVE)
    run = store.one(
        f"SELECT id FROM runs WHERE task_id=? AND status IN ({', '.join('?' for _ in active)}) "
        "ORDER BY created_at DESC, id DESC LIMIT 1",
        (str(task_id), *active),
    )
    if run is None:
        return Commented(task_id, why="its attempt has no run yet")
    inside = run_of()
    if inside is not None:
        return Commented(task_id, why=f"written from inside a run ({inside})")
    message = COMMENT_HEAD + text.strip()
    if len(message) > STEER_MAX_CHARS:
        message = message[: STEER_MAX_CHARS - len(COMMENT_CUT)] + COMMENT_CUT
    try:
        request_steer(store, run["id"], message, by=by, now=when)
    except ControlRefused as exc:  # the attempt ended meanwhile
        return Commented(task_id, why=str(exc))
    return Commented(task_id, steered=str(run["id"]))


# -- kanban retry ------------------------------------------------------------------------------
def retry_task(store: Store, task_id: str | int, *, by: str, now: datetime | None = None) -> None:
    """A ``failed`` or ``blocked`` task back to ``ready`` with one more attempt. Raises
    ``ControlRefused`` (``not_found``, or ``not_retryable`` for any other state)."""
    refuse_inside_run("retry a task")

    try:
        number = int(task_id)
    except ValueError:
        raise ControlRefused(f"{task_id!r} is not a task id (a number)", reason="not_found") from None
    board = Board(store)
    try:
        board.retry(number, now=now or utcnow(), actor=by)
    except TaskNotFound as exc:
        raise ControlRefused(str(exc), reason="not_found") from None
    except ControlRefused:
        raise
    except UsageError as exc:
        raise ControlRefused(str(exc), reason="not_retryable") from None
    finally:
        board.close()


# -- parked approvals ----------------------------------------------------------------------------
def answer_approval(
    store: Store,
    approval_id: str,
    *,
    granted: bool,
    by: str,
    reason: str | None = None,
    now: datetime | None = None,
) -> None:
    """Grant or deny a parked approval; the waiting run continues with that decision and audits
    ``by`` and the time. Raises ``ControlRefused`` (``not_found`` / ``already_decided``; a run that
    ended without seeing an answer counts as decided: its request becomes ``abandoned``)."""
    refuse_inside_run("answer an approval")
    done = answer(store, approval_id, granted=granted, by=by, reason=reason, stamp=iso(now or utcnow()))
    if not done.found:
        raise ControlRefused(f"no approval {approval_id}; see: runner approvals pending", reason="not_found")
    if done.was is not ApprovalState.PENDING:
        raise ControlRefused(f"approval {approval_id} is already {done.was}", reason="already_decided")
    if not done.decided:
        raise ControlRefused(
            f"approval {approval_id}: run {done.run_id} already ended ({done.run_status})", reason="already_decided"
        )
