"""The PostgreSQL store through the real CLI: ``runner run-job`` with RUNNER_DATABASE_URL against
the fake model, ``runner runs show`` reading it back from another RUNNER_HOME (another
"machine": nothing shared but the database), ``database:`` in config.yaml, ``runner db migrate``
on both dialects, ``runner db copy`` (round trip, refusal of a non-empty target), and a
PostgreSQL restart in the middle of a transaction (a StoreFault, not a hang)."""

from __future__ import annotations

import json
import shutil
import threading
import time

import pytest

from runner.store import Store, StoreFault, migration_names
from runner.store.dialect import PgURL
from runner.testing import final as text

pytestmark = pytest.mark.own_store  # each test names its stores (--store does not apply)


def test_run_job_on_postgresql_and_runs_show_from_another_home(project, fake, pg_url, tmp_path):
    fake.add(text("the answer is 42"))
    project.write_jobs("jobs:\n  one:\n    prompt: say it\n")
    env = project.env(RUNNER_DATABASE_URL=pg_url)
    res = project.run("run-job", "one", env=env)
    assert res.returncode == 0, res.stderr
    assert not (project.home / "runner.db").exists()  # nothing went to a local file
    shutil.rmtree(project.home)  # "another machine": this one's outputs and transcripts are gone
    other = project.env(RUNNER_DATABASE_URL=pg_url, RUNNER_HOME=str(tmp_path / "elsewhere"))
    listed = json.loads(project.run("runs", "list", "--json", env=other).stdout)
    [row] = listed if isinstance(listed, list) else listed["runs"]
    assert row["status"] == "succeeded"
    shown = project.run("runs", "show", row["id"], env=other)
    assert shown.returncode == 0, shown.stderr
    assert "the answer is 42" in shown.stdout
    store = Store.open(PgURL(pg_url))
    kept = {r["kind"]: r["body"] for r in store.query("SELECT kind, body FROM run_files WHERE run_id=?", (row["id"],))}
    store.close()
    assert kept["output"] == "the answer is 42" and "say it" in kept["transcript"]
    reindexed = project.run("db", "reindex", env=other)  # outputs come from the store's copies
    assert reindexed.returncode == 0 and "1 outputs" in reindexed.stdout, reindexed.stdout + reindexed.stderr


def test_database_in_config_yaml(project, fake, pg_url):
    fake.add(text("from config"))
    project.home.mkdir(parents=True, exist_ok=True)
    (project.home / "config.yaml").write_text(f"database: {pg_url}\n")
    project.write_jobs("jobs:\n  one:\n    prompt: go\n")
    assert project.run("run-job", "one").returncode == 0
    store = Store.open(PgURL(pg_url))
    assert [r["status"] for r in store.query("SELECT status FROM runs")] == ["succeeded"]
    store.close()


def test_bad_database_setting_is_one_line_exit_2(project):
    project.home.mkdir(parents=True, exist_ok=True)
    (project.home / "config.yaml").write_text("database: mysql://x/y\n")
    res = project.run("runs", "list")
    assert res.returncode == 2 and "database" in res.stderr and "Traceback" not in res.stderr
    res = project.run("runs", "list", env=project.env(RUNNER_DATABASE_URL="postgresql://127.0.0.1:1/x"))
    assert res.returncode == 1 and "cannot connect" in res.stderr and "Traceback" not in res.stderr


def test_db_migrate_on_both_dialects(project, pg_empty_url):
    res = project.run("db", "migrate", env=project.env(RUNNER_DATABASE_URL=pg_empty_url))
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [f"applied {name}" for name in migration_names()]
    again = project.run("db", "migrate", env=project.env(RUNNER_DATABASE_URL=pg_empty_url))
    assert "up to date" in again.stdout and "@" in again.stdout
    local = project.run("db", "migrate")
    assert local.returncode == 0 and local.stdout.count("applied") == len(migration_names())


def test_db_copy_round_trip_and_a_non_empty_target_is_refused(project, fake, pg_empty_url, tmp_path):
    fake.add(text("copied answer"))
    project.write_jobs("jobs:\n  one:\n    prompt: go\n")
    assert project.run("run-job", "one").returncode == 0
    source = project.home / "runner.db"
    res = project.run("db", "copy", f"sqlite:///{source}", pg_empty_url)
    assert res.returncode == 0, res.stderr
    assert "runs: 1" in res.stdout
    pg = Store.open(PgURL(pg_empty_url))
    [row] = pg.query("SELECT * FROM runs")
    assert row["status"] == "succeeded"
    events = pg.one("SELECT COUNT(*) AS n FROM run_events")
    assert events is not None and events["n"] > 0
    # identities continue after the copied rows
    cur = pg.execute("INSERT INTO tasks (title, status, created_at, updated_at) VALUES ('t', 'ready', 'c', 'c')")
    assert cur.lastrowid == 1
    pg.close()
    refused = project.run("db", "copy", f"sqlite:///{source}", pg_empty_url)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "not empty" in refused.stderr
    back = tmp_path / "back.db"
    res = project.run("db", "copy", pg_empty_url, f"sqlite:///{back}")
    assert res.returncode == 0, res.stderr
    again = Store.open(back)
    assert again.one("SELECT status FROM runs")["status"] == "succeeded"  # type: ignore[index]
    again.close()
    show = project.run("runs", "show", row["id"], env=project.env(RUNNER_DATABASE_URL=pg_empty_url))
    assert "copied answer" in show.stdout


def test_a_restart_mid_transaction_is_a_store_fault_not_a_hang(pg_server, pg_url):
    store = Store.open(PgURL(pg_url))
    errors: list[BaseException] = []
    started = threading.Event()

    def hold() -> None:
        try:
            with store.transaction() as conn:
                conn.execute("INSERT INTO job_state (job, updated_at) VALUES ('x', 'now')")
                started.set()
                time.sleep(3)  # the server restarts here
                conn.execute("SELECT 1")
        except BaseException as exc:  # noqa: BLE001 - the test looks at what it was
            errors.append(exc)

    t = threading.Thread(target=hold)
    t.start()
    assert started.wait(10)
    began = time.monotonic()
    pg_server.run_ctl("restart", mode="fast")
    t.join(timeout=30)
    assert not t.is_alive(), "the transaction hung"
    assert time.monotonic() - began < 30
    [exc] = errors
    assert isinstance(exc, StoreFault) and "store error" in str(exc) and "@" in str(exc)
    pg_server.wait_ready()
    # the next statement reconnects; the interrupted transaction left nothing behind
    assert store.one("SELECT COUNT(*) AS n FROM job_state WHERE job='x'") == {"n": 0}
    store.close()


@pytest.mark.parametrize("url", ["postgresql://u:s3cret@127.0.0.1:1/db"])
def test_the_password_never_shows(url):
    from runner.store.dialect import redact_url

    assert "s3cret" not in redact_url(url) and "***" in redact_url(url)


def test_runs_prune_on_postgresql(project, pg_url):
    from datetime import timedelta

    from runner.clock import utcnow
    from runner.store import ledger
    from runner.store.files import FileKind, keep

    store = Store.open(PgURL(pg_url))
    store.execute("INSERT INTO tasks (id, title, status, created_at, updated_at) VALUES (7, 't', 'ready', 'n', 'n')")
    ids = []
    for days, task in ((90, None), (80, "7"), (70, None), (1, None)):
        rid = ledger.open_run(
            store, job="a", trigger="manual", status="queued", now=utcnow() - timedelta(days=days), task_id=task
        )
        store.execute("UPDATE runs SET status='failed' WHERE id=?", (rid,))
        store.execute("INSERT INTO run_events VALUES (?, 1, 'now', 'start', '{}')", (rid,))
        keep(store, rid, FileKind.OUTPUT, "old output")
        ids.append(rid)
    res = project.run(
        "runs",
        "prune",
        "--older-than",
        "30d",
        "--keep-last",
        "1",
        "--json",
        env=project.env(RUNNER_DATABASE_URL=pg_url),
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["runs"] == 2
    left = {r["id"] for r in store.query("SELECT id FROM runs")}
    assert left == {ids[1], ids[3]}  # the attempt of an unfinished task stays, and the newest
    assert {r["run_id"] for r in store.query("SELECT run_id FROM run_files")} == left  # cascade
    store.close()


def test_serve_on_postgresql_fires_runs_and_jobs_list_reads_them(project, pg_url):
    import signal

    from tests.servehelp import SERVE_CONFIG, ServeProc, wait_for

    project.home.mkdir(parents=True, exist_ok=True)
    (project.home / "config.yaml").write_text(
        SERVE_CONFIG.format(max_parallel=4, shutdown_grace=3.0) + f"\ndatabase: {pg_url}\n"
    )
    project.write_jobs("jobs:\n  tick:\n    schedule: every 1s\n    agent: false\n    pre_run: echo tick\n")
    serve = ServeProc(project).started()
    store = Store.open(PgURL(pg_url))
    try:
        wait_for(
            lambda: len(store.query("SELECT id FROM runs WHERE job='tick' AND status='succeeded'")) >= 2,
            30,
            what="two succeeded runs in PostgreSQL",
        )
        listed = project.run("jobs", "list")
        assert listed.returncode == 0 and "tick" in listed.stdout and "serve: running" in listed.stdout, listed.stdout
    finally:
        assert serve.stop(signal.SIGTERM) == 0, serve.log()
    assert not (project.home / "runner.db").exists()
    slots = [r["slot"] for r in store.query("SELECT slot FROM runs WHERE job='tick'")]
    assert len(slots) == len(set(slots))
    assert store.query("SELECT id FROM runs WHERE status IN ('running', 'queued')") == []
    store.close()
