"""``runs.task_id`` references ``tasks(id)`` ON DELETE SET NULL on PostgreSQL too (issue 17).

SQLite has had the key since m0015: its loose TEXT ``task_id`` holds the task's number.
PostgreSQL refuses a FOREIGN KEY between TEXT and BIGINT, and making the column BIGINT would
make it read back as a number on one dialect and as text on the other. So the same key is kept
by triggers there, with a real key's behaviour: a run naming no task is refused (SQLSTATE 23503,
``foreign_key_violation``, which the store raises as ``sqlite3.IntegrityError`` as SQLite does),
the task row is locked ``FOR KEY SHARE`` as PostgreSQL's own keys do, deleting a task sets its
runs' ``task_id`` to NULL, and changing a referenced task's id is refused. First, as m0015 did on
SQLite: a value that is not a number moves to the run's ``reason``, a task id with no task left
gets an archived placeholder task. Nothing to do on SQLite.
"""

from __future__ import annotations

from typing import Any

MARK = "m0019"
#: the key, as ``PRAGMA foreign_key_list`` shows it on SQLite: (column, table, its column, ON DELETE)
KEY = ("task_id", "tasks", "id", "SET NULL")
#: the constraint trigger on ``runs`` that checks it (tests/store/test_schema_dialects.py looks for it)
TRIGGER = "runs_task_id_fkey"

CHECK_RUN = """
CREATE OR REPLACE FUNCTION runs_task_id_fkey() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.task_id IS NULL THEN
        RETURN NEW;
    END IF;
    IF NEW.task_id !~ '^[0-9]{1,18}$'
       OR NOT EXISTS (SELECT 1 FROM tasks WHERE id = CAST(NEW.task_id AS BIGINT) FOR KEY SHARE) THEN
        RAISE EXCEPTION 'FOREIGN KEY constraint failed: runs.task_id % names no task', NEW.task_id
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NEW;
END $$
"""
ON_TASK = """
CREATE OR REPLACE FUNCTION tasks_runs_task_id_fkey() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        UPDATE runs SET task_id = NULL WHERE task_id = CAST(OLD.id AS TEXT);
        RETURN OLD;
    END IF;
    IF NEW.id <> OLD.id AND EXISTS (SELECT 1 FROM runs WHERE task_id = CAST(OLD.id AS TEXT)) THEN
        RAISE EXCEPTION 'FOREIGN KEY constraint failed: task % has runs', OLD.id
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NEW;
END $$
"""


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
    conn.executescript(CHECK_RUN)
    conn.executescript(ON_TASK)
    conn.execute(
        f"CREATE CONSTRAINT TRIGGER {TRIGGER} AFTER INSERT OR UPDATE OF task_id ON runs "
        "FOR EACH ROW EXECUTE FUNCTION runs_task_id_fkey()"
    )
    conn.execute(
        "CREATE TRIGGER tasks_runs_task_id_fkey AFTER DELETE OR UPDATE OF id ON tasks "
        "FOR EACH ROW EXECUTE FUNCTION tasks_runs_task_id_fkey()"
    )
