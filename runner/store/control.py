"""The control tables of migration m0014 as the processes that act on them read and write them:
serve takes trigger requests, a run's cancel watch looks for its cancel request, a parked run
writes and waits on its approval request. ``runner.control`` is the API that asks (CLI, web)."""

from __future__ import annotations

import json
import secrets
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from runner.clock import iso, utcnow
from runner.statuses import ApprovalState, ControlKind, RunStatus
from runner.store import Store


def new_id(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(4)}"


@dataclass(frozen=True)
class TriggerRequest:
    """A ``runner jobs trigger`` serve has not handled yet."""

    id: str
    job: str
    requested_by: str
    requested_at: str


def open_triggers(store: Store) -> list[TriggerRequest]:
    """Trigger requests not handled yet, oldest first."""
    rows = store.query(
        "SELECT id, job, requested_by, requested_at FROM control_requests "
        "WHERE kind=? AND handled_at IS NULL ORDER BY requested_at, id",
        (ControlKind.TRIGGER,),
    )
    return [TriggerRequest(r["id"], r["job"], r["requested_by"], r["requested_at"]) for r in rows]


def mark_handled(store: Store, request_id: str, outcome: str, *, now: datetime | None = None) -> bool:
    """Record that ``request_id`` was acted on (``outcome``: the run id, or why not); False when
    another process handled it first. Call inside the transaction that acts on it."""
    cur = store.execute(
        "UPDATE control_requests SET handled_at=?, outcome=? WHERE id=? AND handled_at IS NULL",
        (iso(now or utcnow()), outcome, request_id),
    )
    return cur.rowcount == 1


def queued_cancels(store: Store) -> list[tuple[str, str, str]]:
    """(request id, run id, requested by) of cancel requests whose run is still ``queued``."""
    rows = store.query(
        "SELECT c.id, c.run_id, c.requested_by FROM control_requests c JOIN runs r ON r.id = c.run_id "
        "WHERE c.kind=? AND c.handled_at IS NULL AND r.status='queued'",
        (ControlKind.CANCEL,),
    )
    return [(r["id"], r["run_id"], r["requested_by"]) for r in rows]


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
    """A run that ended (killed, lost) leaves no request pending: they become ``abandoned``."""
    cur = store.execute(
        "UPDATE approval_requests SET status=?, decided_at=? WHERE run_id=? AND status=?",
        (ApprovalState.ABANDONED, iso(now or utcnow()), run_id, ApprovalState.PENDING),
    )
    return cur.rowcount


def pending(store: Store) -> list[ApprovalRequest]:
    """Approvals runs are parked on now, oldest first (a run that ended meanwhile is not listed)."""
    rows = store.query(
        "SELECT a.* FROM approval_requests a JOIN runs r ON r.id = a.run_id "
        "WHERE a.status=? AND r.status=? ORDER BY a.requested_at, a.id",
        (ApprovalState.PENDING, RunStatus.RUNNING),
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
        return self.was is ApprovalState.PENDING and self.run_status is RunStatus.RUNNING


def answer(
    store: Store, approval_id: str, *, granted: bool, by: str, reason: str | None, stamp: str | None
) -> Answered:
    """Grant or deny a pending approval whose run still runs, in one transaction."""
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
