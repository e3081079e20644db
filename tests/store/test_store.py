"""The store: migrations, pragmas, the ledger's crash recovery."""

import os
import signal
import sqlite3
import subprocess
import sys

import pytest

from runner.store import Store, ledger, migration_names
from runner.testing import hang


def test_migrations_applied_once_and_recorded(tmp_path):
    path = tmp_path / "r.db"
    store = Store.open(path)
    applied = store.applied_migrations()
    assert applied == set(migration_names())
    assert store.migrate() == []
    assert store.one("PRAGMA journal_mode")["journal_mode"] == "wal"
    assert (os.stat(path).st_mode & 0o777) == 0o600
    store.close()
    again = Store.open(path)
    assert again.migrate() == []


def test_unique_job_slot(tmp_path):
    store = Store.open(tmp_path / "r.db")
    ledger.open_run(store, job="a", trigger="schedule", slot="2026-01-01T02:00:00+00:00", status="queued")
    with pytest.raises(sqlite3.IntegrityError):
        ledger.open_run(store, job="a", trigger="schedule", slot="2026-01-01T02:00:00+00:00", status="queued")
    ledger.open_run(store, job="a", trigger="schedule", slot="2026-01-01T02:00:00+00:00", status="queued", attempt=2)


def test_orphan_from_dead_pid_becomes_unknown(tmp_path):
    store = Store.open(tmp_path / "r.db")
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    run_id = ledger.open_run(store, job="a", trigger="manual")
    store.execute("UPDATE runs SET pid=? WHERE id=?", (proc.pid, run_id))
    live = ledger.open_run(store, job="b", trigger="manual")  # this process: alive
    done = ledger.open_run(store, job="c", trigger="manual")
    ledger.finish(store, done, "succeeded")
    assert len(ledger.recover_orphans(store)) == 1
    statuses = {r["id"]: r["status"] for r in store.query("SELECT id, status FROM runs")}
    assert statuses == {run_id: "unknown", live: "running", done: "succeeded"}


def test_sigkilled_run_becomes_unknown_on_next_command(project, fake):
    fake.add(hang(30))
    project.write_jobs("jobs:\n  slow:\n    prompt: go\n")
    proc = project.start_job("slow", fake)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    db = project.db()
    assert db.execute("SELECT status FROM runs").fetchone()[0] == "running"
    res = project.cli("runs", "list", "--json")
    assert '"status": "unknown"' in res.output
    assert db.execute("SELECT status, reason FROM runs").fetchone() == ("unknown", "worker_lost")


def test_each_thread_has_its_own_connection_and_close_closes_them(tmp_path):
    """A subagent's or a parallel tool call's thread never shares the opener's connection (two
    transactions on one connection fail), and closing the store closes the threads' ones too."""
    import threading

    store = Store.open(tmp_path / "runner.db")
    seen: list[sqlite3.Connection] = []

    def work():
        with store.transaction() as conn:
            seen.append(conn)
            conn.execute("SELECT 1")

    t = threading.Thread(target=work)
    t.start()
    t.join(30)
    assert len(seen) == 1 and seen[0] is not store.conn
    with store.transaction() as conn:  # the opener's own connection is untouched by the thread's
        assert conn is store.conn and not seen[0].in_transaction
    store.close()
    with pytest.raises(sqlite3.ProgrammingError):
        seen[0].execute("SELECT 1")
