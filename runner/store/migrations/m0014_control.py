"""Live control through the store: requests to serve and to running runs (``control_requests``:
``runner jobs trigger``, ``runner runs cancel``), and approvals a run parked until a person answers
(``approval_requests``: ``runner approvals pending | grant | deny``)."""

from __future__ import annotations

from typing import Any

STATEMENTS = [
    """
    CREATE TABLE control_requests (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL CHECK (kind IN ('trigger', 'cancel')),
        job TEXT,
        run_id TEXT,
        requested_by TEXT NOT NULL,
        requested_at TEXT NOT NULL,
        handled_at TEXT,
        outcome TEXT
    )
    """,
    "CREATE INDEX control_pending ON control_requests(kind, requested_at) WHERE handled_at IS NULL",
    "CREATE INDEX control_run ON control_requests(run_id) WHERE run_id IS NOT NULL",
    """
    CREATE TABLE approval_requests (
        id TEXT PRIMARY KEY,
        run_id TEXT NOT NULL,
        job TEXT NOT NULL,
        command TEXT NOT NULL,
        reasons TEXT NOT NULL DEFAULT '[]',
        requested_at TEXT NOT NULL,
        expires_at TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'pending'
            CHECK (status IN ('pending', 'granted', 'denied', 'expired', 'cancelled', 'abandoned')),
        decided_by TEXT,
        decided_at TEXT,
        reason TEXT
    )
    """,
    "CREATE INDEX approval_requests_pending ON approval_requests(requested_at) WHERE status = 'pending'",
    "CREATE INDEX approval_requests_run ON approval_requests(run_id)",
]


def apply(db: Any) -> None:
    for statement in STATEMENTS:
        db.execute(statement)
