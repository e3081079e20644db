"""Memory notes held for the operator (``memory_pending``, migration m0021): every SQL statement
``runner.memory.held`` and ``runner memory pending | accept | reject`` use. A note is held when
the injection scan flags it; nothing here decides that, nor writes the notebook."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from runner.clock import iso, utcnow
from runner.statuses import HeldState
from runner.store import Store
from runner.store.control import new_id


@dataclass(frozen=True)
class HeldNote:
    """A held write: ``action`` is ``add`` or ``replace`` (of the entry containing ``old_text``)."""

    id: str
    scope: str
    action: str
    content: str
    old_text: str
    findings: tuple[str, ...]
    run_id: str | None
    job: str | None
    held_at: str
    status: HeldState
    decided_by: str | None = None
    decided_at: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``runner memory pending --json``."""
        return {**asdict(self), "findings": list(self.findings), "status": str(self.status)}

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> HeldNote:
        return cls(
            str(row["id"]),
            str(row["scope"]),
            str(row["action"]),
            str(row["content"]),
            str(row["old_text"]),
            tuple(str(f) for f in json.loads(row["findings"] or "[]")),
            row["run_id"],
            row["job"],
            str(row["held_at"]),
            HeldState(row["status"]),
            row["decided_by"],
            row["decided_at"],
        )


@dataclass(frozen=True)
class Hold:
    """What a run asks to hold."""

    scope: str
    action: str
    content: str
    old_text: str
    findings: tuple[str, ...]
    run_id: str | None = None
    job: str | None = None


def same_pending(store: Store, hold: Hold) -> HeldNote | None:
    """The pending note that holds exactly this write already, or None."""
    row = store.one(
        "SELECT * FROM memory_pending WHERE scope=? AND action=? AND content=? AND old_text=? AND status=?",
        (hold.scope, hold.action, hold.content, hold.old_text, HeldState.PENDING),
    )
    return HeldNote.from_row(row) if row else None


def pending_count(store: Store, scope: str) -> int:
    row = store.one("SELECT COUNT(*) AS n FROM memory_pending WHERE scope=? AND status=?", (scope, HeldState.PENDING))
    return int(row["n"]) if row else 0


def insert(store: Store, hold: Hold, *, now: datetime | None = None) -> HeldNote:
    """Store ``hold`` as pending; the note as stored."""
    note_id = new_id("m")
    store.execute(
        "INSERT INTO memory_pending (id, scope, action, content, old_text, findings, run_id, job, held_at, status, seq) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM memory_pending))",
        (
            note_id,
            hold.scope,
            hold.action,
            hold.content,
            hold.old_text,
            json.dumps(list(hold.findings), ensure_ascii=False),
            hold.run_id,
            hold.job,
            iso(now or utcnow()),
            HeldState.PENDING,
        ),
    )
    found = get(store, note_id)
    assert found is not None, note_id
    return found


def get(store: Store, note_id: str) -> HeldNote | None:
    row = store.one("SELECT * FROM memory_pending WHERE id=?", (note_id,))
    return HeldNote.from_row(row) if row else None


def pending(store: Store) -> list[HeldNote]:
    """Every note still waiting for the operator, oldest first."""
    rows = store.query("SELECT * FROM memory_pending WHERE status=? ORDER BY seq", (HeldState.PENDING,))
    return [HeldNote.from_row(r) for r in rows]


def decide(store: Store, note_id: str, state: HeldState, *, by: str, now: datetime | None = None) -> bool:
    """Mark a pending note ``state``; False when it was not pending (decided meanwhile, or no such id)."""
    cur = store.execute(
        "UPDATE memory_pending SET status=?, decided_by=?, decided_at=? WHERE id=? AND status=?",
        (state, by, iso(now or utcnow()), note_id, HeldState.PENDING),
    )
    return cur.rowcount == 1


def accepted_contents(store: Store, scope: str) -> frozenset[str]:
    """The text of every note the operator accepted into ``scope``."""
    rows = store.query("SELECT content FROM memory_pending WHERE scope=? AND status=?", (scope, HeldState.ACCEPTED))
    return frozenset(str(r["content"]) for r in rows)
