"""A run's files in the store (issue 17): its output and transcript as text, so a machine other
than the one that ran it can show them. Written only when the store is PostgreSQL (a SQLite store
sits beside RUNNER_HOME's files already); read when the file itself is not on this machine."""

from __future__ import annotations

from typing import Any

STATEMENTS = [
    """
    CREATE TABLE run_files (
        run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        kind TEXT NOT NULL CHECK (kind IN ('output', 'transcript')),
        body TEXT NOT NULL,
        written_at TEXT NOT NULL,
        PRIMARY KEY (run_id, kind)
    )
    """,
]


def apply(db: Any) -> None:
    for statement in STATEMENTS:
        db.execute(statement)
