"""The store people query: foreign keys added by m0015 on a ledger main made before, cascades,
JSON columns that hold valid JSON (not JSON inside strings), auto_vacuum, the schema doc."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from runner.store import Store, ledger, migration_names
from runner.testing import call, final

BEFORE = [n for n in migration_names() if n <= "m0011"]


def _old_ledger(path: Path) -> None:
    """A runner.db as main wrote it before this change: migrations m0001..m0011 only, with rows
    (a kanban attempt, events whose tool-call arguments are JSON text, an approval, and orphans:
    events and an approval of a run whose row is gone)."""
    import importlib

    import sqlite_utils

    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
    db = sqlite_utils.Database(conn)
    for name in BEFORE:
        importlib.import_module(f"runner.store.migrations.{name}").apply(db)
        conn.execute("INSERT INTO _migrations VALUES (?, '2026-01-01T00:00:00+00:00')", (name,))
    conn.execute(
        "INSERT INTO tasks (title, status, created_at, updated_at) VALUES ('t', 'done', '2026-01-01', '2026-01-01')"
    )
    runs = [("r1", "a", "manual", None), ("r2", "b", "kanban", "1"), ("r3", "b", "kanban", "99")]
    for rid, job, trig, task in runs:
        conn.execute(
            "INSERT INTO runs (id, job, trigger, status, created_at, task_id) VALUES (?, ?, ?, 'succeeded', "
            "'2026-01-01T00:00:00+00:00', ?)",
            (rid, job, trig, task),
        )
    events = [
        ("r1", 1, "tool_call", {"id": "c1", "name": "terminal", "arguments": '{"command": "ls"}'}),
        ("r1", 2, "response", {"tool_calls": [{"name": "terminal", "arguments": '{"command": "ls"}'}]}),
        ("r1", 3, "tool_call", {"id": "c2", "name": "terminal", "arguments": "{not json"}),
        ("gone", 1, "start", {"job": "x"}),
    ]
    for rid, seq, kind, payload in events:
        conn.execute(
            "INSERT INTO run_events VALUES (?, ?, '2026-01-01T00:00:01+00:00', ?, ?)",
            (rid, seq, kind, json.dumps(payload)),
        )
    for rid in ("r1", "gone-too"):
        conn.execute(
            "INSERT INTO approvals (run_id, ts, command, level, reasons, decision, decided_by) "
            "VALUES (?, '2026-01-01T00:00:02+00:00', 'rm -rf x', 'dangerous', '[\"recursive delete\"]', 'denied', 'policy')",
            (rid,),
        )
    conn.execute("CREATE TRIGGER other_branch AFTER INSERT ON run_events BEGIN SELECT 1; END")
    conn.execute("CREATE INDEX other_branch_idx ON approvals(decision)")
    conn.close()


def _counts(path: Path) -> dict[str, int]:
    conn = sqlite3.connect(path)
    try:
        return {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("runs", "run_events", "approvals")}
    finally:
        conn.close()


def test_m0015_on_a_ledger_main_made_keeps_everything_and_adds_the_keys(tmp_path):
    path = tmp_path / "runner.db"
    _old_ledger(path)
    before = _counts(path)
    store = Store.open(path)
    after = _counts(path)
    # every row kept; the orphans got one placeholder run each ("gone", "gone-too")
    assert after["run_events"] == before["run_events"] and after["approvals"] == before["approvals"]
    assert after["runs"] == before["runs"] + 2
    placeholder = store.one("SELECT job, status, reason FROM runs WHERE id='gone'")
    assert placeholder == {"job": "(unknown)", "status": "unknown", "reason": "orphaned"}
    fks = {
        t: [(r["from"], r["table"], r["on_delete"]) for r in store.query(f"PRAGMA foreign_key_list({t})")]
        for t in ("run_events", "approvals", "runs")
    }
    assert fks == {
        "run_events": [("run_id", "runs", "CASCADE")],
        "approvals": [("run_id", "runs", "CASCADE")],
        "runs": [("task_id", "tasks", "SET NULL")],
    }
    assert store.query("PRAGMA foreign_key_check") == []
    assert store.one("PRAGMA foreign_keys")["foreign_keys"] == 1
    assert store.one("PRAGMA auto_vacuum")["auto_vacuum"] == 2  # incremental (the VACUUM ran)
    # the kanban attempt of a task that is gone got an archived placeholder task
    assert store.one("SELECT status FROM tasks WHERE id=99")["status"] == "archived"
    # what other migrations put on the rebuilt tables survived, and so did the original indexes
    names = {r["name"] for r in store.query("SELECT name FROM sqlite_master WHERE type IN ('index','trigger')")}
    assert {"other_branch", "other_branch_idx", "approvals_run", "runs_job_slot", "runs_task", "runs_ended"} <= names
    # JSON inside strings became JSON; text that never was JSON stays text
    args = [
        json.loads(r["p"]) for r in store.query("SELECT payload AS p FROM run_events WHERE run_id='r1' ORDER BY seq")
    ]
    assert args[0]["arguments"] == {"command": "ls"}
    assert args[1]["tool_calls"][0]["arguments"] == {"command": "ls"}
    assert args[2]["arguments"] == "{not json"
    store.close()


def test_events_and_approvals_follow_their_run_and_need_one(tmp_path):
    store = Store.open(tmp_path / "r.db")
    rid = ledger.open_run(store, job="a", trigger="manual")
    store.execute("INSERT INTO run_events VALUES (?, 1, 'now', 'start', '{}')", (rid,))
    store.execute(
        "INSERT INTO approvals (run_id, ts, command, level, decision, decided_by) VALUES (?, 'now', 'x', 'd', 'denied', 'p')",
        (rid,),
    )
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        store.execute("INSERT INTO run_events VALUES ('no-such-run', 1, 'now', 'start', '{}')")
    store.execute("DELETE FROM runs WHERE id=?", (rid,))
    assert store.one("SELECT COUNT(*) AS n FROM run_events")["n"] == 0
    assert store.one("SELECT COUNT(*) AS n FROM approvals")["n"] == 0


#: every column that holds JSON
JSON_COLUMNS = [
    ("run_events", "payload"),
    ("runs", "delivery"),
    ("approvals", "reasons"),
    ("budget_runs", "providers"),
    ("curator_runs", "changes"),
    ("task_events", "payload"),
    ("memory_pending", "findings"),
]


def test_a_real_run_stores_json_columns_as_json(project, fake):
    fake.add(call("terminal", {"command": "echo hi"}), call("read_file", '{"path": "nope.txt"}'), final("done"))
    project.write_jobs("jobs:\n  j:\n    prompt: go\n    deliver: [stdout]\n    approvals: deny\n")
    res = project.run("run-job", "j")
    assert res.returncode == 0, res.stderr
    added = project.run("kanban", "add", "a task", "--job", "j")
    assert added.returncode == 0, added.stderr
    db = project.db()
    for table, column in JSON_COLUMNS:
        bad = db.execute(f"SELECT COUNT(*) FROM {table} WHERE {column} IS NOT NULL AND NOT json_valid({column})")
        assert bad.fetchone()[0] == 0, (table, column)
    # no JSON text wrapped in a JSON string anywhere in the payloads
    wrapped = db.execute(
        "SELECT COUNT(*) FROM run_events, json_tree(run_events.payload) AS t WHERE t.type = 'text' "
        "AND json_valid(t.value) AND substr(trim(t.value), 1, 1) IN ('{', '[')"
        if not project.database_url
        else "SELECT COUNT(*) FROM run_events, jsonb_path_query(run_events.payload::jsonb, 'strict $.**') AS t "
        "WHERE jsonb_typeof(t) = 'string' AND json_valid(t #>> '{}') AND substr(trim(t #>> '{}'), 1, 1) IN ('{', '[')"
    ).fetchone()[0]
    assert wrapped == 0
    calls = [
        json.loads(p)["arguments"]
        for (p,) in db.execute("SELECT payload FROM run_events WHERE kind='tool_call' ORDER BY seq")
    ]
    assert calls == [{"command": "echo hi"}, {"path": "nope.txt"}]
    json_type = "jsonb_typeof(delivery::jsonb)" if project.database_url else "json_type(delivery)"
    assert db.execute(f"SELECT {json_type} FROM runs").fetchone()[0] == "array"
    assert db.execute("SELECT COUNT(*) FROM task_events").fetchone()[0] >= 1


def test_store_doc_matches_the_live_schema(tmp_path):
    from runner.store.schema_doc import render

    doc = (Path(__file__).resolve().parents[2] / "docs" / "store.md").read_text()
    live = render(Store.open(tmp_path / "r.db"))
    assert live in doc, "docs/store.md is stale: run `COLUMNS=200 cog -r docs/store.md`"


def test_m0023_keeps_control_requests_and_takes_steer_messages(tmp_path):
    """A ledger at m0022 with control rows, and an index another migration put on the table: the
    rebuild keeps the rows, the index and the foreign key; a ``steer`` row with a message is taken,
    an unknown kind still refused."""
    import importlib

    import sqlite_utils

    path = tmp_path / "runner.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
    db = sqlite_utils.Database(conn)
    for name in [n for n in migration_names() if n < "m0023"]:
        importlib.import_module(f"runner.store.migrations.{name}").apply(db)
        conn.execute("INSERT INTO _migrations VALUES (?, '2026-01-01T00:00:00+00:00')", (name,))
    conn.execute("INSERT INTO runs (id, job, trigger, status, created_at) VALUES ('r1', 'j', 'manual', 'running', 'x')")
    conn.execute(
        "INSERT INTO control_requests (id, kind, job, run_id, requested_by, requested_at, handled_at, outcome) "
        "VALUES ('t1', 'trigger', 'j', NULL, 'a@h', 't', 't', 'r1'), ('c1', 'cancel', 'j', 'r1', 'b@h', 't', NULL, NULL)"
    )
    conn.execute("CREATE INDEX other_branch_control ON control_requests(requested_by)")
    conn.close()
    store = Store.open(path)
    try:
        rows = store.query("SELECT id, kind, run_id, outcome, message FROM control_requests ORDER BY id")
        assert rows == [
            {"id": "c1", "kind": "cancel", "run_id": "r1", "outcome": None, "message": None},
            {"id": "t1", "kind": "trigger", "run_id": None, "outcome": "r1", "message": None},
        ]
        names = {r["name"] for r in store.query("SELECT name FROM sqlite_master WHERE tbl_name='control_requests'")}
        assert {"control_pending", "control_run", "other_branch_control"} <= names
        fks = [(r["from"], r["table"], r["on_delete"]) for r in store.query("PRAGMA foreign_key_list(control_requests)")]
        assert fks == [("run_id", "runs", "CASCADE")]
        store.execute(
            "INSERT INTO control_requests (id, kind, run_id, requested_by, requested_at, message) "
            "VALUES ('s1', 'steer', 'r1', 'a@h', 't', 'hello')"
        )
        with pytest.raises(sqlite3.IntegrityError):
            store.execute(
                "INSERT INTO control_requests (id, kind, requested_by, requested_at) VALUES ('x', 'bogus', 'a', 't')"
            )
    finally:
        store.close()


def test_m0029_on_a_store_at_m0028_adds_trigger_vars(tmp_path):
    """A ledger at m0028 with trigger requests (one handled, one open): they stay, with no vars;
    a trigger written after carries its vars to serve (``open_triggers``) and to its run's
    adopter (``trigger_vars_of``, through the new partial index)."""
    import importlib

    import sqlite_utils

    from runner.store.control import open_triggers, request_trigger, trigger_vars_of

    path = tmp_path / "runner.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
    db = sqlite_utils.Database(conn)
    for name in [n for n in migration_names() if n <= "m0028"]:
        importlib.import_module(f"runner.store.migrations.{name}").apply(db)
        conn.execute("INSERT INTO _migrations VALUES (?, '2026-01-01T00:00:00+00:00')", (name,))
    conn.execute("INSERT INTO runs (id, job, trigger, status, created_at) VALUES ('r1', 'j', 'manual', 'queued', 'x')")
    conn.execute(
        "INSERT INTO control_requests (id, kind, job, requested_by, requested_at, handled_at, outcome) "
        "VALUES ('t1', 'trigger', 'j', 'a@h', 't1', 't', 'r1'), ('t2', 'trigger', 'j', 'b@h', 't2', NULL, NULL)"
    )
    conn.close()
    store = Store.open(path)
    try:
        assert store.query("SELECT id, vars FROM control_requests ORDER BY id") == [
            {"id": "t1", "vars": None},
            {"id": "t2", "vars": None},
        ]
        assert [(t.id, t.vars) for t in open_triggers(store)] == [("t2", ())]
        assert trigger_vars_of(store, "r1") == ()
        names = {r["name"] for r in store.query("SELECT name FROM sqlite_master WHERE tbl_name='control_requests'")}
        assert "control_requests_trigger_run" in names
        request_id = request_trigger(store, "j", by="c@h", vars={"repo": "acme", "branch": "main"})
        [fresh] = [t for t in open_triggers(store) if t.id == request_id]
        assert fresh.vars == (("branch", "main"), ("repo", "acme"))
        store.execute("UPDATE control_requests SET handled_at='t', outcome='r2' WHERE id=?", (request_id,))
        assert trigger_vars_of(store, "r2") == (("branch", "main"), ("repo", "acme"))
    finally:
        store.close()
