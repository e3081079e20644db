"""Steering (issue 32): ``control_requests`` takes a third kind, ``steer`` (``runner runs say RUN
MESSAGE``, the dashboard's box, a kanban comment on a running task), and its text in a new column,
``message``. The run's own process reads the row through the same watch that sees a cancel, gives
the model the text before its next request, and marks the row handled when the run ends
(``outcome``: ``delivered``, or why not).

SQLite cannot change a CHECK constraint, so the table is rebuilt (create, copy with its rowids,
drop, rename) with its two indexes and its foreign key; PostgreSQL changes it in place."""

from __future__ import annotations

from typing import Any

KINDS = "('trigger', 'cancel', 'steer')"
TEMP = "_m0023_control_requests"
COLUMNS = "id, kind, job, run_id, requested_by, requested_at, handled_at, outcome"
INDEXES = [
    "CREATE INDEX control_pending ON control_requests(kind, requested_at) WHERE handled_at IS NULL",
    "CREATE INDEX control_run ON control_requests(run_id) WHERE run_id IS NOT NULL",
]


def apply(db: Any) -> None:
    conn = db.conn
    conn.execute(
        f"""
        CREATE TABLE "{TEMP}" (
            id TEXT PRIMARY KEY,
            kind TEXT NOT NULL CHECK (kind IN {KINDS}),
            job TEXT,
            run_id TEXT,
            requested_by TEXT NOT NULL,
            requested_at TEXT NOT NULL,
            handled_at TEXT,
            outcome TEXT,
            message TEXT,
            FOREIGN KEY ("run_id") REFERENCES "runs"("id") ON DELETE CASCADE
        )
        """
    )
    conn.execute(f'INSERT INTO "{TEMP}" (rowid, {COLUMNS}) SELECT rowid, {COLUMNS} FROM control_requests')
    conn.execute("DROP TABLE control_requests")  # its indexes go with it
    conn.execute(f'ALTER TABLE "{TEMP}" RENAME TO control_requests')
    for statement in INDEXES:
        conn.execute(statement)


def apply_postgresql(db: Any) -> None:
    """The same on PostgreSQL: the column added, the kind's CHECK (named by PostgreSQL after the
    table and column) replaced in place."""
    db.execute("ALTER TABLE control_requests ADD COLUMN message TEXT")
    db.execute("ALTER TABLE control_requests DROP CONSTRAINT IF EXISTS control_requests_kind_check")
    db.execute(f"ALTER TABLE control_requests ADD CONSTRAINT control_requests_kind_check CHECK (kind IN {KINDS})")
