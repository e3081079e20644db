"""Follow-ups (m0028): one more run of a job, asked for by a run of it (``schedule_followup``).

The asking side (``add``) counts the job's pending follow-ups and stores the new one in one
transaction, so the bound holds against two runs asking at once. serve's schedule ticker reads the
due ones (``due``) and ``claim``s each inside the transaction that opens its run: the row goes
``pending`` -> ``fired`` only once, so a follow-up fires once across a serve restart and with a
standby scheduler. ``cancel`` is ``runner jobs followups cancel`` (and the dashboard's button).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from runner.clock import iso
from runner.statuses import FollowupState
from runner.store import Store


class FollowupRefused(Exception):
    """A follow-up that cannot be stored or cancelled as asked; the message says why in one line."""


@dataclass(frozen=True)
class Followup:
    id: str
    job: str
    run_id: str | None  # the run that asked
    note: str
    created_at: str
    due_at: str
    status: FollowupState
    fired_at: str | None = None
    fired_run_id: str | None = None
    cancelled_by: str | None = None
    cancelled_at: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "status": str(self.status)}

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Followup:
        return cls(
            row["id"],
            row["job"],
            row["run_id"],
            row["note"],
            row["created_at"],
            row["due_at"],
            FollowupState(row["status"]),
            row["fired_at"],
            row["fired_run_id"],
            row["cancelled_by"],
            row["cancelled_at"],
        )


def add(
    store: Store, *, followup_id: str, job: str, run_id: str, note: str, due: datetime, now: datetime, max_pending: int
) -> Followup:
    """Store a pending follow-up of ``job``; ``FollowupRefused`` when the job has ``max_pending``."""
    with store.transaction() as conn:
        count = conn.execute(
            "SELECT COUNT(*) FROM followups WHERE job=? AND status=?", (job, FollowupState.PENDING)
        ).fetchone()[0]
        if count >= max_pending:
            raise FollowupRefused(
                f"job {job} already has {count} pending follow-ups (followups.max_pending: {max_pending})"
            )
        conn.execute(
            "INSERT INTO followups (id, job, run_id, note, created_at, due_at, status) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (followup_id, job, run_id, note, iso(now), iso(due), FollowupState.PENDING),
        )
    return get(store, followup_id)


def get(store: Store, followup_id: str) -> Followup:
    row = store.one("SELECT * FROM followups WHERE id=?", (followup_id,))
    if row is None:
        raise FollowupRefused(f"no follow-up {followup_id} (see: runner jobs followups list)")
    return Followup.from_row(row)


def pending(store: Store, job: str | None = None) -> list[Followup]:
    """Pending follow-ups (of ``job``), soonest first."""
    where, params = ("AND job=?", (job,)) if job else ("", ())
    rows = store.query(
        f"SELECT * FROM followups WHERE status=? {where} ORDER BY due_at, id", (FollowupState.PENDING, *params)
    )
    return [Followup.from_row(r) for r in rows]


def due(store: Store, now: datetime) -> list[Followup]:
    """Pending follow-ups whose time has come, oldest first."""
    rows = store.query(
        "SELECT * FROM followups WHERE status=? AND due_at <= ? ORDER BY due_at, id", (FollowupState.PENDING, iso(now))
    )
    return [Followup.from_row(r) for r in rows]


def claim(store: Store, followup_id: str, run_id: str, now: datetime) -> bool:
    """Mark a due follow-up fired by run ``run_id``; False when another serve (or a cancel) took
    it first. Call inside the transaction that opens the run."""
    cur = store.execute(
        "UPDATE followups SET status=?, fired_at=?, fired_run_id=? WHERE id=? AND status=?",
        (FollowupState.FIRED, iso(now), run_id, followup_id, FollowupState.PENDING),
    )
    return cur.rowcount == 1


def cancel(store: Store, followup_id: str, *, by: str, now: datetime) -> Followup:
    """Cancel a pending follow-up; ``FollowupRefused`` when there is none or it fired already."""
    with store.transaction():
        found = get(store, followup_id)
        if found.status is not FollowupState.PENDING:
            raise FollowupRefused(f"follow-up {followup_id} is already {found.status}")
        store.execute(
            "UPDATE followups SET status=?, cancelled_by=?, cancelled_at=? WHERE id=? AND status=?",
            (FollowupState.CANCELLED, by, iso(now), followup_id, FollowupState.PENDING),
        )
    return get(store, followup_id)


def of_run(store: Store, run_id: str) -> Followup | None:
    """The follow-up run ``run_id`` was opened for, or None."""
    row = store.one("SELECT * FROM followups WHERE fired_run_id=?", (run_id,))
    return Followup.from_row(row) if row else None
