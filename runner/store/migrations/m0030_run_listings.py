"""Run listings that stay fast with a million runs: each listing is read from an index in the
order it shows, newest first, and stops after a page. ``runner runs list`` (all, ``--job``,
``--status``) and the dashboard's runs pages (filtered by job or status, keyset pages) order by
``(created_at, id)``; the overview's recent failures are a status and a time range.

- ``runs_created (created_at, id)``: all runs, newest first;
- ``runs_job_recent (job, created_at, id)`` replaces ``runs_job_created (job, created_at)`` (a
  prefix of it: a job's newest run, its colour strip);
- ``runs_status_recent (status, created_at, id)`` replaces ``runs_status (status)`` (a prefix of
  it: the queued, running and waiting counts).

The same statements on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

STATEMENTS = [
    "CREATE INDEX runs_created ON runs(created_at, id)",
    "CREATE INDEX runs_job_recent ON runs(job, created_at, id)",
    "CREATE INDEX runs_status_recent ON runs(status, created_at, id)",
    "DROP INDEX runs_job_created",
    "DROP INDEX runs_status",
]


def apply(db: Any) -> None:
    for statement in STATEMENTS:
        db.execute(statement)
