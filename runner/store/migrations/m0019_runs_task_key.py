"""``runs.task_id`` references ``tasks(id)`` ON DELETE SET NULL on PostgreSQL too (issue 17).

SQLite has had the key since m0015 (its columns are loose: a TEXT ``task_id`` holds the task's
number). PostgreSQL refuses a key between TEXT and BIGINT, so there the column becomes BIGINT
first, as m0015 did on SQLite: a value that is not a number is moved to the run's ``reason`` text,
a task id with no task left gets an archived placeholder task. Nothing to do on SQLite.
"""

from __future__ import annotations

from typing import Any

MARK = "m0019"


def apply(db: Any) -> None:
    return None  # SQLite: m0015 added the key


def apply_postgresql(db: Any) -> None:
    conn = db.conn
    conn.execute(
        "UPDATE runs SET reason = COALESCE(reason || '; ', '') || 'task ' || task_id, task_id = NULL "
        "WHERE task_id IS NOT NULL AND task_id !~ '^[0-9]{1,18}$'"
    )
    conn.execute(
        "INSERT INTO tasks (id, title, status, created_at, updated_at) "
        "SELECT CAST(task_id AS BIGINT), '(missing task)', 'archived', MIN(created_at), MIN(created_at) "
        "FROM runs WHERE task_id IS NOT NULL AND CAST(task_id AS BIGINT) NOT IN (SELECT id FROM tasks) "
        "GROUP BY CAST(task_id AS BIGINT)"
    )
    conn.execute("ALTER TABLE runs ALTER COLUMN task_id TYPE BIGINT USING CAST(task_id AS BIGINT)")
    conn.execute(
        'ALTER TABLE runs ADD CONSTRAINT runs_task_id_fkey FOREIGN KEY ("task_id") REFERENCES "tasks"("id") '
        "ON DELETE SET NULL"
    )
