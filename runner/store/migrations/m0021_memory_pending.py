"""Memory notes held for the operator (issue 29): a note a run writes that the injection scan
flags is not stored in its notebook but here, ``pending`` until ``runner memory accept ID`` stores
it in the notebook (the operator's decision) or ``runner memory reject ID`` drops it. ``content``
is the note as the run wrote it with secrets masked; ``findings`` the scan's reasons (JSON list);
``seq`` the order notes were held in (two in one millisecond keep it)."""

from __future__ import annotations

from typing import Any

STATEMENTS = [
    """
    CREATE TABLE memory_pending (
        id TEXT PRIMARY KEY,
        scope TEXT NOT NULL,
        action TEXT NOT NULL CHECK (action IN ('add', 'replace')),
        content TEXT NOT NULL,
        old_text TEXT NOT NULL DEFAULT '',
        findings TEXT NOT NULL DEFAULT '[]',
        run_id TEXT,
        job TEXT,
        held_at TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'accepted', 'rejected')),
        decided_by TEXT,
        decided_at TEXT,
        seq INTEGER NOT NULL DEFAULT 0
    )
    """,
    "CREATE INDEX memory_pending_open ON memory_pending(scope, held_at) WHERE status = 'pending'",
]


def apply(db: Any) -> None:
    for statement in STATEMENTS:
        db.execute(statement)
