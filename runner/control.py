"""Live control of runs through the store: what ``runner jobs trigger``, ``runner runs cancel``,
``runner kanban retry``, ``runner approvals pending | grant | deny`` and the web dashboard's
buttons call.

Nothing here talks to a process: each call writes a row to runner.db and returns. serve's
schedule ticker picks up trigger requests (also those written while it was down, at its start);
a running run's cancel watch (``runner.run.cancel``) sees its cancel request; a run parked on an
approval (``runner.safety.parked``) sees the answer. So control works without a socket and
survives a serve restart. None of it is done for a process that is part of a run
(``runner.safety.inside``): a run cannot answer its own approval. ``by`` names who asked: ``user@host`` from the CLI (``whoami``), the
token's name from the web.
"""

from __future__ import annotations

import getpass
import socket
from datetime import datetime
from typing import Any

from runner.clock import iso, utcnow
from runner.errors import UsageError
from runner.safety.inside import refuse_inside_run
from runner.statuses import ACTIVE, ApprovalState, ControlKind
from runner.store import Store, control
from runner.store.control import ApprovalRequest, new_id
from runner.store.runs import get_run


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
def request_trigger(store: Store, job: str, *, by: str, now: datetime | None = None) -> str:
    """Ask serve to run ``job`` now (trigger ``manual``, through its pool and policies); return the
    request id. The caller checks that the job exists (serve records an unknown one as handled
    with an error)."""
    refuse_inside_run("trigger a job")
    request_id = new_id("t")
    with store.transaction() as conn:
        conn.execute(
            "INSERT INTO control_requests (id, kind, job, requested_by, requested_at) VALUES (?, ?, ?, ?, ?)",
            (request_id, ControlKind.TRIGGER, job, by, iso(now or utcnow())),
        )
    return request_id


def trigger_outcome(store: Store, request_id: str) -> dict[str, Any] | None:
    """The request row (``handled_at`` and ``outcome`` once serve took it), or None."""
    return store.one("SELECT * FROM control_requests WHERE id=?", (request_id,))


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


# -- kanban --------------------------------------------------------------------------------------
def retry_task(store: Store, task_id: str | int, *, by: str, now: datetime | None = None) -> None:
    """A ``failed`` or ``blocked`` task back to ``ready`` with one more attempt. Raises
    ``ControlRefused`` (``not_found``, or ``not_retryable`` for any other state)."""
    refuse_inside_run("retry a task")
    from runner.kanban.board import Board
    from runner.kanban.model import TaskNotFound

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
def pending_approvals(store: Store) -> list[ApprovalRequest]:
    """Approvals runs are parked on now, oldest first (a run that ended meanwhile is not listed)."""
    return control.pending(store)


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
    done = control.answer(store, approval_id, granted=granted, by=by, reason=reason, stamp=iso(now or utcnow()))
    if not done.found:
        raise ControlRefused(f"no approval {approval_id}; see: runner approvals pending", reason="not_found")
    if done.was is not ApprovalState.PENDING:
        raise ControlRefused(f"approval {approval_id} is already {done.was}", reason="already_decided")
    if not done.decided:
        raise ControlRefused(
            f"approval {approval_id}: run {done.run_id} already ended ({done.run_status})", reason="already_decided"
        )
