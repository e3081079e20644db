"""Steering (issue 32): ``control_requests`` takes a third kind, ``steer`` (``runner runs say RUN
MESSAGE``, the dashboard's box, a kanban comment on a running task), and its text in a new column,
``message``. The run's own process reads the row through the same watch that sees a cancel, gives
the model the text before its next request, and marks the row handled when the run ends
(``outcome``: ``delivered``, or why not).

SQLite cannot change a CHECK constraint, so the table is rebuilt as m0015 rebuilt tables: its own
CREATE statement with the kind's list extended (kinds another migration added stay), every column
copied with its rowid, then renamed; its indexes and triggers, whatever they are, are read first and
made again. PostgreSQL changes the constraint in place."""

from __future__ import annotations

import re
from typing import Any

KIND = "steer"
TEMP = "_m0023_control_requests"
_CHECK = re.compile(r"CHECK\s*\(\s*kind\s+IN\s*\(([^)]*)\)\s*\)", re.IGNORECASE)
_CREATE = re.compile(r'^\s*CREATE\s+TABLE\s+("[^"]+"|\[[^\]]+\]|`[^`]+`|\w+)', re.IGNORECASE)


def kinds_with_steer(listed: str) -> str:
    """``'trigger', 'cancel'`` -> ``('trigger', 'cancel', 'steer')``."""
    kinds = [k.strip() for k in listed.split(",") if k.strip()]
    if f"'{KIND}'" not in kinds:
        kinds.append(f"'{KIND}'")
    return f"({', '.join(kinds)})"


def apply(db: Any) -> None:
    conn = db.conn
    sql = str(conn.execute("SELECT sql FROM sqlite_master WHERE type='table' AND name='control_requests'").fetchone()[0])
    keep = [
        str(r[0])
        for r in conn.execute(
            "SELECT sql FROM sqlite_master WHERE tbl_name='control_requests' AND type IN ('index', 'trigger') "
            "AND sql IS NOT NULL ORDER BY rowid"
        )
    ]
    new_sql = _CHECK.sub(lambda m: f"CHECK (kind IN {kinds_with_steer(m.group(1))})", sql, count=1)
    conn.execute(_CREATE.sub(f'CREATE TABLE "{TEMP}"', new_sql, count=1))
    cols = ", ".join(f'"{r[1]}"' for r in conn.execute('PRAGMA table_info("control_requests")'))
    conn.execute(f'INSERT INTO "{TEMP}" (rowid, {cols}) SELECT rowid, {cols} FROM control_requests')
    conn.execute("DROP TABLE control_requests")  # its indexes and triggers go with it
    conn.execute(f'ALTER TABLE "{TEMP}" RENAME TO control_requests')
    conn.execute("ALTER TABLE control_requests ADD COLUMN message TEXT")
    for statement in keep:
        conn.execute(statement)


def apply_postgresql(db: Any) -> None:
    """The same on PostgreSQL: the column added, the kind's CHECK (named by PostgreSQL after the
    table and column) made again with ``steer`` among its kinds."""
    db.execute("ALTER TABLE control_requests ADD COLUMN message TEXT")
    row = db.execute(
        "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE conrelid = 'control_requests'::regclass AND conname = 'control_requests_kind_check'"
    ).fetchone()
    kinds = ["'trigger'", "'cancel'"]
    if row is not None:  # e.g. CHECK ((kind = ANY (ARRAY['trigger'::text, 'cancel'::text])))
        kinds = [f"'{k}'" for k in re.findall(r"'([^']*)'", str(row[0]))]
    db.execute("ALTER TABLE control_requests DROP CONSTRAINT IF EXISTS control_requests_kind_check")
    db.execute(
        "ALTER TABLE control_requests ADD CONSTRAINT control_requests_kind_check "
        f"CHECK (kind IN {kinds_with_steer(', '.join(kinds))})"
    )
