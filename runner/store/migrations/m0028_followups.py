"""Follow-ups (issue 34.3): one more run of a job that a run of it asked for with the
``schedule_followup`` tool. ``due_at`` when serve fires it (once: it claims the row ``pending`` ->
``fired`` in the transaction that opens the run, ``fired_run_id``), ``note`` the asking run's
note (redacted; shown to the follow-up run as data), ``run_id`` the run that asked; ``cancelled``
by ``runner jobs followups cancel``, ``cancelled_by`` who."""

from __future__ import annotations

from typing import Any

STATEMENTS = [
    """
    CREATE TABLE followups (
        id TEXT PRIMARY KEY,
        job TEXT NOT NULL,
        run_id TEXT,
        note TEXT NOT NULL DEFAULT '',
        created_at TEXT NOT NULL,
        due_at TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'fired', 'cancelled')),
        fired_at TEXT,
        fired_run_id TEXT,
        cancelled_by TEXT,
        cancelled_at TEXT
    )
    """,
    "CREATE INDEX followups_pending ON followups(due_at) WHERE status = 'pending'",
    "CREATE INDEX followups_job ON followups(job, status)",
]


def apply(db: Any) -> None:
    for statement in STATEMENTS:
        db.execute(statement)
