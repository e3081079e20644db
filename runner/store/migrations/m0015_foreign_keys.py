"""Foreign keys and JSON as JSON, so the store reads well in sqlite3 and Datasette.

- ``run_events.run_id``, ``approvals.run_id``, ``approval_requests.run_id`` and
  ``control_requests.run_id`` reference ``runs(id)`` ON DELETE CASCADE (a run's events, approval
  audit, parked requests and cancel requests go with it when retention prunes it);
- ``runs.task_id`` (a kanban task's attempt is a run) references ``tasks(id)`` ON DELETE SET NULL;
- tool-call arguments in ``run_events.payload`` become JSON objects instead of JSON text inside a
  string (``{"arguments": {"path": "a"}}``, not ``{"arguments": "{\\"path\\": \\"a\\"}"}``);
- ``auto_vacuum=INCREMENTAL`` is recorded (it takes effect at the ``VACUUM`` that
  ``Store.migrate`` runs after this migration commits), so pruning can return space.

SQLite cannot add a constraint to a table, so each table is rebuilt (create new, copy with its
rowids, drop, rename). Indexes of a rebuilt table, and every trigger and view of the schema
(other migrations may have added some), are read from ``sqlite_master`` first and recreated after,
whatever they are. Rows that point at a run or task that no longer exists are kept: a placeholder
``unknown`` run (or archived task) is written for them. ``Store.migrate`` runs migrations with
foreign keys off and checks them (``PRAGMA foreign_key_check``) before committing.
"""

from __future__ import annotations

import json
import re
from typing import Any

MARK = "m0015"
#: table -> the constraint appended to its CREATE TABLE
FOREIGN_KEYS = {
    "runs": 'FOREIGN KEY ("task_id") REFERENCES "tasks"("id") ON DELETE SET NULL',
    "run_events": 'FOREIGN KEY ("run_id") REFERENCES "runs"("id") ON DELETE CASCADE',
    "approvals": 'FOREIGN KEY ("run_id") REFERENCES "runs"("id") ON DELETE CASCADE',
    "approval_requests": 'FOREIGN KEY ("run_id") REFERENCES "runs"("id") ON DELETE CASCADE',
    "control_requests": 'FOREIGN KEY ("run_id") REFERENCES "runs"("id") ON DELETE CASCADE',
}
_CREATE = re.compile(r'^\s*CREATE\s+TABLE\s+("[^"]+"|\[[^\]]+\]|`[^`]+`|\w+)', re.IGNORECASE)


def apply(db: Any) -> None:
    conn = db.conn
    keep = _schema_objects(conn)
    for kind, name, _sql in keep:
        conn.execute(f'DROP {kind.upper()} IF EXISTS "{name}"')
    for table, constraint in FOREIGN_KEYS.items():
        _rebuild(conn, table, constraint)
    for _kind, _name, sql in keep:
        conn.execute(sql)
    _keep_orphans(conn)
    _arguments_as_json(conn)
    conn.execute("PRAGMA auto_vacuum=INCREMENTAL")


def _schema_objects(conn: Any) -> list[tuple[str, str, str]]:
    """What must survive the rebuilds: the explicit indexes of the rebuilt tables and every
    trigger and view (a trigger elsewhere may name a rebuilt table), in creation order."""
    tables = tuple(FOREIGN_KEYS)
    marks = ", ".join("?" for _ in tables)
    rows = conn.execute(
        f"SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL AND "
        f"((type = 'index' AND tbl_name IN ({marks})) OR type IN ('trigger', 'view')) ORDER BY rowid",
        tables,
    ).fetchall()
    return [(str(r[0]), str(r[1]), str(r[2])) for r in rows]


def _rebuild(conn: Any, table: str, constraint: str) -> None:
    row = conn.execute("SELECT sql FROM sqlite_master WHERE type='table' AND name=?", (table,)).fetchone()
    sql = str(row[0]).rstrip()
    if constraint in sql:
        return
    temp = f"_{MARK}_{table}"
    new_sql = _CREATE.sub(f'CREATE TABLE "{temp}"', sql, count=1)
    new_sql = new_sql[: new_sql.rindex(")")].rstrip() + f",\n   {constraint}\n)"
    conn.execute(new_sql)
    cols = ", ".join(f'"{r[1]}"' for r in conn.execute(f'PRAGMA table_info("{table}")'))
    conn.execute(f'INSERT INTO "{temp}" (rowid, {cols}) SELECT rowid, {cols} FROM "{table}"')
    conn.execute(f'DROP TABLE "{table}"')
    conn.execute(f'ALTER TABLE "{temp}" RENAME TO "{table}"')


def _keep_orphans(conn: Any) -> None:
    """Events and approvals of a run row that is gone get a placeholder run, kanban attempts of a
    task that is gone an archived placeholder task: nothing is dropped to add the keys."""
    conn.execute(
        "INSERT INTO runs (id, job, trigger, status, reason, error, created_at, ended_at) "
        "SELECT run_id, '(unknown)', 'manual', 'unknown', 'orphaned', ?, MIN(ts), MAX(ts) FROM "
        "(SELECT run_id, ts FROM run_events UNION ALL SELECT run_id, ts FROM approvals WHERE run_id IS NOT NULL "
        "UNION ALL SELECT run_id, requested_at FROM approval_requests "
        "UNION ALL SELECT run_id, requested_at FROM control_requests WHERE run_id IS NOT NULL) "
        "WHERE run_id NOT IN (SELECT id FROM runs) GROUP BY run_id",
        (f"placeholder written by migration {MARK}: events or approvals named this run but its row was missing",),
    )
    conn.execute(
        "INSERT INTO tasks (id, title, status, created_at, updated_at) "
        "SELECT DISTINCT CAST(task_id AS INTEGER), '(missing task)', 'archived', MIN(created_at), MIN(created_at) "
        "FROM runs WHERE task_id IS NOT NULL AND CAST(task_id AS INTEGER) NOT IN (SELECT id FROM tasks) "
        "AND task_id GLOB '[0-9]*' AND task_id NOT GLOB '*[^0-9]*' GROUP BY CAST(task_id AS INTEGER)"
    )
    # a task id that is not a number cannot name a task: kept in the run's reason text instead
    conn.execute(
        "UPDATE runs SET reason = COALESCE(reason || '; ', '') || 'task ' || task_id, task_id = NULL "
        "WHERE task_id IS NOT NULL AND task_id NOT IN (SELECT CAST(id AS TEXT) FROM tasks)"
    )


def _arguments_as_json(conn: Any) -> None:
    """Tool-call arguments stored as JSON text inside the payload become the JSON they hold."""
    conn.execute(
        "UPDATE run_events SET payload = json_set(payload, '$.arguments', json(json_extract(payload, '$.arguments'))) "
        "WHERE kind = 'tool_call' AND json_valid(payload) AND json_type(payload, '$.arguments') = 'text' "
        "AND json_valid(json_extract(payload, '$.arguments'))"
    )
    rows = conn.execute(
        "SELECT rowid, payload FROM run_events WHERE kind = 'response' AND json_valid(payload) "
        "AND json_array_length(payload, '$.tool_calls') > 0"
    ).fetchall()
    for rowid, payload in rows:
        doc = json.loads(payload)
        doc["tool_calls"] = [{**c, "arguments": arguments_value(c.get("arguments"))} for c in doc["tool_calls"]]
        conn.execute(
            "UPDATE run_events SET payload = ? WHERE rowid = ?",
            (json.dumps(doc, ensure_ascii=False, separators=(",", ":")), rowid),
        )


def arguments_value(arguments: Any) -> Any:
    """A tool call's arguments as stored: the JSON value they hold, or the text itself when the
    model sent something that is not JSON."""
    if not isinstance(arguments, str):
        return arguments
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


# -- PostgreSQL (issue 17): constraints are added in place (no rebuild, no pragmas) ---------------
def apply_postgresql(db: Any) -> None:
    """The same keys on PostgreSQL, except ``runs.task_id`` -> ``tasks.id``: the columns' types
    differ there (TEXT and BIGINT, as SQLite declared them) and PostgreSQL refuses a key between
    them, so a task's runs are found by value as before. Orphans get placeholders first."""
    conn = db.conn
    _keep_orphans_pg(conn)
    for table, constraint in FOREIGN_KEYS.items():
        if table != "runs":
            conn.execute(f'ALTER TABLE "{table}" ADD CONSTRAINT "{table}_run_id_fkey" {constraint}')
    rows = conn.execute(
        "SELECT run_id, seq, payload FROM run_events WHERE kind IN ('tool_call', 'response') AND json_valid(payload)"
    ).fetchall()
    for run_id, seq, payload in rows:
        doc = json.loads(payload)
        if not isinstance(doc, dict):
            continue
        if "arguments" in doc:
            doc["arguments"] = arguments_value(doc["arguments"])
        if isinstance(doc.get("tool_calls"), list):
            doc["tool_calls"] = [{**c, "arguments": arguments_value(c.get("arguments"))} for c in doc["tool_calls"]]
        conn.execute(
            "UPDATE run_events SET payload = ? WHERE run_id = ? AND seq = ?",
            (json.dumps(doc, ensure_ascii=False, separators=(",", ":")), run_id, seq),
        )


def _keep_orphans_pg(conn: Any) -> None:
    conn.execute(
        "INSERT INTO runs (id, job, trigger, status, reason, error, created_at, ended_at) "
        "SELECT run_id, '(unknown)', 'manual', 'unknown', 'orphaned', ?, MIN(ts), MAX(ts) FROM "
        "(SELECT run_id, ts FROM run_events UNION ALL SELECT run_id, ts FROM approvals WHERE run_id IS NOT NULL "
        "UNION ALL SELECT run_id, requested_at FROM approval_requests "
        "UNION ALL SELECT run_id, requested_at FROM control_requests WHERE run_id IS NOT NULL) AS named "
        "WHERE run_id NOT IN (SELECT id FROM runs) GROUP BY run_id",
        (f"placeholder written by migration {MARK}: events or approvals named this run but its row was missing",),
    )
