"""Retention on real SQLite and the real CLI and serve: what `runner runs prune` removes (runs with
their events and approvals by cascade, outputs, transcripts), what it always keeps, --dry-run
changing nothing, space given back, serve's daily pass."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

from runner.clock import iso, utcnow
from runner.store import Store
from runner.store import ledger as run_ledger
from tests.servehelp import rows, serve_factory, wait_for, write_config

OLD = utcnow() - timedelta(days=60)


def _run(store: Store, home: Path, job: str, *, days_ago: float, status: str = "succeeded", **kw: object) -> str:
    """A finished run of ``job`` created ``days_ago`` with two events, an approval, an output and a transcript."""
    when = utcnow() - timedelta(days=days_ago)
    rid = run_ledger.open_run(store, job=job, trigger="manual", status="queued", now=when, **kw)  # type: ignore[arg-type]
    out = home / "outputs" / job / f"{rid}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("x" * 1000)
    (home / "logs" / "runs").mkdir(parents=True, exist_ok=True)
    (home / "logs" / "runs" / f"{rid}.json").write_text("[]")
    store.execute("UPDATE runs SET status=?, output_path=? WHERE id=?", (status, str(out), rid))
    for seq in (1, 2):
        store.execute("INSERT INTO run_events VALUES (?, ?, ?, 'start', '{}')", (rid, seq, iso(when)))
    store.execute(
        "INSERT INTO approvals (run_id, ts, command, level, decision, decided_by) VALUES (?, ?, 'rm x', 'dangerous', 'denied', 'policy')",
        (rid, iso(when)),
    )
    return rid


@pytest.fixture
def ledger(project):
    project.home.mkdir(parents=True, exist_ok=True)
    store = project.open_store()
    yield store
    store.close()


def _ids(home: Path) -> set[str]:
    return {r["id"] for r in rows(home, "SELECT id FROM runs")}


def test_prune_keeps_last_n_per_job_and_everything_live(project, ledger):
    home = project.home
    old_a = [_run(ledger, home, "a", days_ago=90 - i, status="failed") for i in range(5)]
    newest_success_b = _run(ledger, home, "b", days_ago=80)  # b's only success: its output is last_output
    old_b = [_run(ledger, home, "b", days_ago=70 - i, status="failed") for i in range(3)]
    recent = _run(ledger, home, "a", days_ago=1)
    running = _run(ledger, home, "c", days_ago=50, status="queued")
    run_ledger.start(ledger, running)  # by this (live) process, so opening the store does not recover it
    reserved = _run(ledger, home, "c", days_ago=50, status="failed")
    ledger.execute(
        "INSERT INTO budget_runs (run_id, job, state, reserved_micro) VALUES (?, 'c', 'open', 1)", (reserved,)
    )
    ledger.execute(
        "INSERT INTO tasks (id, title, status, created_at, updated_at) VALUES (7, 't', 'ready', 'now', 'now'), "
        "(8, 'u', 'done', 'now', 'now')"
    )
    parked = _run(ledger, home, "c", days_ago=50, status="failed")  # a parked request still open
    ledger.execute(
        "INSERT INTO approval_requests (id, run_id, job, command, requested_at, expires_at) "
        "VALUES ('ap1', ?, 'c', 'rm x', 'now', 'later')",
        (parked,),
    )
    answered = old_b[0]  # an answered request goes with its run
    ledger.execute(
        "INSERT INTO approval_requests (id, run_id, job, command, requested_at, expires_at, status) "
        "VALUES ('ap2', ?, 'b', 'rm y', 'now', 'later', 'granted')",
        (answered,),
    )
    attempt_open = _run(ledger, home, "k", days_ago=50, status="failed", task_id="7")
    attempt_done = _run(ledger, home, "k", days_ago=50, status="failed", task_id="8")
    for job in ("c", "k"):  # two newer runs each, so keep_last protects none of the old ones above
        _run(ledger, home, job, days_ago=2)
        _run(ledger, home, job, days_ago=1)

    res = project.run("runs", "prune", "--older-than", "30d", "--keep-last", "2", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    left = _ids(home)
    # a: the newest 2 of its 6 runs stay (recent + the youngest old one); b: the newest 2 of 4 plus
    # its only success; c: running and reserved stay; k: only the finished task's attempt goes
    # (c and k keep their two newest runs anyway)
    expected_gone = set(old_a[:4]) | {old_b[0]} | {attempt_done}
    assert left.isdisjoint(expected_gone)
    assert {recent, old_a[4], newest_success_b, old_b[1], old_b[2], running, reserved, parked, attempt_open} <= left
    assert [r["id"] for r in rows(home, "SELECT id FROM approval_requests")] == ["ap1"]
    assert out["runs"] == len(expected_gone) and out["events"] == 2 * len(expected_gone)
    assert out["approvals"] == len(expected_gone) and out["files"] == 2 * len(expected_gone)
    # cascade: nothing of a pruned run is left in the store or on disk
    for rid in expected_gone:
        assert rows(home, "SELECT 1 FROM run_events WHERE run_id=?", (rid,)) == []
        assert rows(home, "SELECT 1 FROM approvals WHERE run_id=?", (rid,)) == []
        assert not (home / "logs" / "runs" / f"{rid}.json").exists()
        assert not list((home / "outputs").rglob(f"{rid}.md"))
    if not project.database_url:  # PostgreSQL checks its keys on every write
        db = sqlite3.connect(home / "runner.db")
        assert db.execute("PRAGMA foreign_key_check").fetchall() == []


@pytest.mark.sqlite_only("compares the runner.db file's bytes")
def test_dry_run_changes_nothing(project, ledger):
    for i in range(30):
        _run(ledger, project.home, "a", days_ago=40 + i)
    ledger.close()
    db_path = project.home / "runner.db"
    before = (db_path.read_bytes(), sorted(p.name for p in project.home.rglob("*") if p.is_file()))
    res = project.run("runs", "prune", "--older-than", "30d", "--keep-last", "5", "--dry-run")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("would remove 25 runs (50 events, 25 approvals), 50 files")
    assert _ids(project.home) and len(_ids(project.home)) == 30
    assert before[1] == sorted(p.name for p in project.home.rglob("*") if p.is_file())
    db = sqlite3.connect(db_path)
    assert db.execute("SELECT COUNT(*) FROM run_events").fetchone()[0] == 60


@pytest.mark.sqlite_only("the runner.db file's size after pruning (PostgreSQL: autovacuum)")
def test_prune_gives_space_back(project, ledger):
    big = json.dumps({"text": "y" * 4000})
    for i in range(300):
        rid = run_ledger.open_run(ledger, job="a", trigger="manual", status="failed", now=OLD - timedelta(minutes=i))
        for seq in range(1, 6):
            ledger.execute("INSERT INTO run_events VALUES (?, ?, 'now', 'big', ?)", (rid, seq, big))
    ledger.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    ledger.close()
    size = (project.home / "runner.db").stat().st_size
    res = project.run("runs", "prune", "--keep-last", "0", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["runs"] == 300  # keep-last 0 and no success to keep: all of them
    assert 0 < out["longest_hold_ms"] < 5000  # the longest any of its transactions held the write lock
    after = (project.home / "runner.db").stat().st_size
    assert after < size / 4, (size, after)


@pytest.mark.sqlite_only("SQLite's free list (PostgreSQL: autovacuum)")
def test_space_goes_back_as_runs_go(project, ledger):
    """The pages each chunk of runs frees go back in the same transaction, so the free list never
    grows past one chunk's pages (SQLite walks the whole free list for each page it gives back: a
    long one made a step of a few hundred pages hold the lock for half a second); a step that
    finds free pages left over gives them back before any run is deleted; the connection's
    automatic checkpoint is as it was afterwards."""
    from runner.store.retention import CHUNK, Policy, Pruner

    big = json.dumps({"text": "z" * 3000})
    for i in range(120):
        rid = run_ledger.open_run(ledger, job="a", trigger="manual", status="failed", now=OLD - timedelta(minutes=i))
        for seq in range(1, 9):
            ledger.execute("INSERT INTO run_events VALUES (?, ?, 'now', 'big', ?)", (rid, seq, big))
    ledger.execute("DELETE FROM run_events WHERE run_id = ?", (rid,))  # pages free before the prune
    free = lambda: ledger.one("PRAGMA freelist_count")["freelist_count"]  # noqa: E731
    assert free() > 0
    pruner = Pruner(ledger, project.home, Policy(older_than=86400, keep_last=0), utcnow(), batch=CHUNK)
    steps, most = 0, 0
    while True:
        free_before, pending_before = free(), pruner.pending
        more = pruner.step()
        steps += 1
        if free_before:  # space first: no run deleted in this step
            assert pruner.pending == pending_before
        most = max(most, free())
        if not more:
            break
    assert steps >= 120 // CHUNK + 1 and free() == 0 and pruner.pending == 0
    assert most == 0  # each chunk's pages went back with it
    result = pruner.result()
    assert result.runs == 120 and 0 < result.longest_hold_ms < 5000
    assert ledger.one("PRAGMA wal_autocheckpoint")["wal_autocheckpoint"] == 1000


def test_bad_older_than_is_one_line(project):
    res = project.run("runs", "prune", "--older-than", "soon")
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0 and "--older-than" in res.stderr


@pytest.fixture
def serve(project):
    yield from serve_factory(project)


def test_serve_applies_retention_at_start(project, ledger, serve):
    project.write_jobs("jobs:\n  a:\n    prompt: go\n")
    old = [_run(ledger, project.home, "a", days_ago=40 + i, status="failed") for i in range(6)]
    ledger.close()
    write_config(project)
    with open(project.home / "config.yaml", "a") as fh:
        fh.write("retention: {runs_older_than: 30d, keep_last: 2, batch: 2}\n")
    proc = serve().started()
    wait_for(lambda: len(_ids(project.home)) == 2, what="serve's retention pass")
    proc.wait_log("retention: removed 4 runs (8 events), 8 files")
    assert _ids(project.home) == set(old[:2])
    assert proc.stop() == 0


def test_old_kanban_logs_of_finished_tasks_go(project, ledger):
    ledger.execute(
        "INSERT INTO tasks (id, title, status, created_at, updated_at) VALUES (1, 'a', 'done', 'now', 'now'), "
        "(2, 'b', 'running', 'now', 'now')"
    )
    ledger.close()
    logs = project.home / "logs" / "kanban"
    logs.mkdir(parents=True)
    old = (utcnow() - timedelta(days=40)).timestamp()
    for name in ("1", "2", "3"):  # done, still running, task gone
        (logs / f"{name}.log").write_text("attempt\n")
        os.utime(logs / f"{name}.log", (old, old))
    (logs / "4.log").write_text("fresh\n")
    (project.home / "config.yaml").write_text("retention: {logs_older_than: 30d}\n")
    res = project.run("runs", "prune", "--json")
    assert res.returncode == 0, res.stderr
    assert sorted(Path(p).name for p in json.loads(res.stdout)["logs"]) == ["1.log", "3.log"]
    assert sorted(p.name for p in logs.iterdir()) == ["2.log", "4.log"]


@pytest.mark.parametrize(("budget_s", "batch"), [(0.0, 50), (60.0, 4)])
def test_a_step_stops_at_its_time_budget_or_batch(project, ledger, budget_s, batch):
    """A step deletes runs a chunk at a time until it has held the lock for its budget (at least
    one chunk, so a slow ledger still moves) or ``batch`` runs went, whichever comes first."""
    from runner.store.retention import CHUNK, Policy, Pruner

    for i in range(40):
        _run(ledger, project.home, "a", days_ago=40 + i, status="failed")
    policy = Policy(older_than=86400, keep_last=0)
    pruner = Pruner(ledger, project.home, policy, utcnow(), batch=batch, budget_s=budget_s)
    taken = []
    while pruner.step():
        taken.append(pruner.result().runs - sum(taken))
    taken.append(pruner.result().runs - sum(taken))
    per_step = min(CHUNK, batch)  # budget 0: one chunk a step; a large budget: batch runs a step
    assert [n for n in taken if n] == [per_step] * (40 // per_step) + ([40 % per_step] if 40 % per_step else [])


def test_a_writer_beside_the_prune_gets_in_between_its_steps(project, ledger):
    """Outcome of the pause (SQLite) and of the lock queue (PostgreSQL): another connection writing
    while the prune runs step after step gets its transactions in between the steps, not after
    the prune."""
    from runner.store.retention import Policy, Pruner

    for i in range(320):
        _run(ledger, project.home, "a", days_ago=40 + i / 10, status="failed")
    pruner = Pruner(ledger, project.home, Policy(older_than=86400, keep_last=0), utcnow(), budget_s=0.0)
    stop, written, steps = threading.Event(), [], []

    def write() -> None:
        other = project.open_store()
        try:
            while not stop.is_set():
                run_ledger.open_run(other, job="b", trigger="manual", status="queued")
                written.append(len(steps))  # how many steps had ended when this write committed
        finally:
            other.close()

    writer = threading.Thread(target=write)
    writer.start()
    wait_for(lambda: written, timeout=10, what="the writer's first write")
    try:
        while pruner.step():
            steps.append(1)
            time.sleep(pruner.pause)
    finally:
        stop.set()
        writer.join(timeout=30)
    assert pruner.result().runs == 320 and len(steps) >= 19  # a chunk of 16 a step
    between = {n for n in written if 0 < n < len(steps)}
    assert len(between) >= len(steps) // 2, (len(steps), sorted(between))
