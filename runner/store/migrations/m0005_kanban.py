"""The kanban board: tasks, their dependency links, comments and an append-only event log."""

from __future__ import annotations

from typing import Any

STATEMENTS = [
    """
    CREATE TABLE tasks (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        title TEXT NOT NULL,
        body TEXT NOT NULL DEFAULT '',
        status TEXT NOT NULL
            CHECK (status IN ('todo', 'ready', 'running', 'blocked', 'done', 'failed', 'archived')),
        priority INTEGER NOT NULL DEFAULT 0,
        job TEXT,
        attempts INTEGER NOT NULL DEFAULT 0,
        max_attempts INTEGER NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
        lease_owner TEXT,
        lease_expires TEXT,
        fence INTEGER NOT NULL DEFAULT 0,
        worker_pid INTEGER,
        worker_pid_start TEXT,
        host TEXT,
        not_before TEXT,
        result TEXT,
        error TEXT,
        reason TEXT,
        created_by TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    )
    """,
    "CREATE INDEX tasks_claim ON tasks(priority DESC, created_at, id) WHERE status = 'ready'",
    "CREATE INDEX tasks_todo ON tasks(id) WHERE status = 'todo'",
    "CREATE INDEX tasks_lease ON tasks(lease_expires) WHERE status = 'running'",
    """
    CREATE TABLE task_links (
        parent INTEGER NOT NULL REFERENCES tasks(id),
        child INTEGER NOT NULL REFERENCES tasks(id),
        PRIMARY KEY (parent, child),
        CHECK (parent != child)
    )
    """,
    "CREATE INDEX task_links_child ON task_links(child, parent)",
    """
    CREATE TABLE task_comments (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        task_id INTEGER NOT NULL REFERENCES tasks(id),
        author TEXT NOT NULL,
        body TEXT NOT NULL,
        created_at TEXT NOT NULL
    )
    """,
    "CREATE INDEX task_comments_task ON task_comments(task_id, id)",
    """
    CREATE TABLE task_events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        task_id INTEGER NOT NULL,
        ts TEXT NOT NULL,
        kind TEXT NOT NULL,
        fence INTEGER,
        payload TEXT NOT NULL DEFAULT '{}'
    )
    """,
    "CREATE INDEX task_events_task ON task_events(task_id, id)",
    "CREATE INDEX runs_task ON runs(task_id) WHERE task_id IS NOT NULL",
]


def apply(db: Any) -> None:
    for statement in STATEMENTS:
        db.execute(statement)
