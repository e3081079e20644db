"""A real `runner serve` under store and config faults (issue 37): a second process holding
SQLite's write lock past busy_timeout, RUNNER_HOME on a small tmpfs filled and freed, an empty
jobs.yaml saved over a good one, serve stopped with a run still waiting. serve rides each out:
it logs, retries, alerts once and carries on; nothing is lost and no thread dies with a traceback."""

from __future__ import annotations

import errno
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from tests.conftest import Project
from tests.receivers import Receiver
from tests.servehelp import ServeProc, job_rows, rows, serve_factory, small_tmpfs, ts, wait_for, write_config


@pytest.fixture
def serve(project):
    yield from serve_factory(project)


def alerts_config(project: Project, receiver: Receiver, **serve: str) -> None:
    write_config(project, max_parallel=serve.pop("max_parallel", 8))  # type: ignore[arg-type]
    with open(project.home / "config.yaml", "a") as fh:
        fh.write(f"alerts: ['webhook:{receiver.url}/a']\nalerts_throttle: {{every: 1, min_interval: 1h}}\n")
        fh.write("delivery: {attempts: 2, backoff: 0.05}\n")


def alerts(receiver: Receiver, event: str) -> list[dict]:
    return [r.json() for r in receiver.requests if r.json()["event"] == event]


def succeeded(home: Path, job: str, after: datetime | None = None, before: datetime | None = None) -> list[dict]:
    return [
        r
        for r in job_rows(home, job)
        if r["status"] == "succeeded"
        and (after is None or ts(r["slot"]) > after)
        and (before is None or ts(r["slot"]) < before)
    ]


HOLD = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("COMMIT")
"""


# -- a write lock held past busy_timeout -----------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.sqlite_only("a second process holding runner.db's write lock")
def test_a_write_lock_held_past_busy_timeout_is_ridden_out(project, serve, receiver: Receiver):
    """45 s of `BEGIN EXCLUSIVE` by another process (busy_timeout is 30 s): serve survives, says the
    store cannot answer, alerts once, and the slots due during the lock get their rows after it."""
    alerts_config(project, receiver)
    project.write_jobs("jobs:\n  tick:\n    schedule: every 3s\n    agent: false\n    pre_run: 'true'\n")
    daemon = serve().started()
    wait_for(lambda: succeeded(project.home, "tick"), 20, what="a first run")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(project.home / "runner.db"), "45"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        locked_at = datetime.now(UTC)
        assert holder.wait(timeout=120) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    released_at = datetime.now(UTC)
    assert daemon.proc.poll() is None, daemon.log()[-3000:]
    # the slot due during the lock is fired once the store answers, and firing goes on after it
    wait_for(lambda: succeeded(project.home, "tick", locked_at, released_at), 40, what="a slot of the lock's time")
    wait_for(lambda: succeeded(project.home, "tick", released_at), 20, what="a slot after the lock")
    assert daemon.proc.poll() is None, daemon.log()[-3000:]
    log = daemon.log()
    assert "the store cannot answer" in log and "answers again" in log, log[-3000:]
    assert "Traceback" not in log, log[-5000:]
    (alert,) = alerts(receiver, "store_unavailable")
    assert "runner.db" in (alert["error"] or ""), alert
    assert daemon.stop() == 0
    slots = [ts(r["slot"]) for r in job_rows(project.home, "tick") if r["attempt"] == 1]
    assert len(set(slots)) == len(slots), "a slot twice"
    gaps = {b - a for a, b in zip(slots, slots[1:], strict=False)}
    assert gaps == {timedelta(seconds=3)}, f"a slot without a row: {sorted(gaps)}"
    assert not [r for r in job_rows(project.home, "tick") if r["status"] in ("running", "queued")]
    (instance,) = rows(project.home, "SELECT * FROM serve_instance")
    assert instance["stopped_at"] is not None


# -- a full disk -----------------------------------------------------------------------------------------
@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A real 8 MB tmpfs (needs root, or CAP_SYS_ADMIN); skipped where mounting is not allowed."""
    with small_tmpfs(tmp_path, 8) as mnt:
        yield mnt


def fill(path: Path) -> int:
    """Write zeros to ``path`` until the filesystem is full; the bytes written."""
    written = 0
    chunk = b"\0" * 65536
    with open(path, "wb", buffering=0) as fh:
        while True:
            try:
                written += fh.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                break
    while True:  # the last partial chunk: down to single pages
        try:
            with open(path, "ab", buffering=0) as fh:
                fh.write(b"\0" * 4096)
        except OSError:
            return written


@pytest.mark.slow
@pytest.mark.sqlite_only("RUNNER_HOME (runner.db) on a small filesystem")
def test_a_full_disk_is_ridden_out(project, small_fs):
    """RUNNER_HOME on an 8 MB tmpfs, filled to the last byte for 25 s and freed: serve keeps going
    (it exited 1 after 13 s before), logs it, fires again once there is space, and writes
    `stopped_at` at its clean stop."""
    proj = Project(root=project.root, home=small_fs / "home", base_url=project.base_url)
    write_config(proj)
    proj.write_jobs("jobs:\n  tick:\n    schedule: every 2s\n    agent: false\n    pre_run: 'echo tick'\n")
    daemon = ServeProc(proj)
    try:
        daemon.started()
        wait_for(lambda: succeeded(proj.home, "tick"), 20, what="a first run")
        filler = small_fs / "filler"
        # the WAL emptied first, as a checkpoint that truncates it leaves it: serve's next writes
        # need new space, which is not there
        db = sqlite3.connect(proj.home / "runner.db", timeout=30)
        assert db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
        db.close()
        fill(filler)
        time.sleep(25)
        assert daemon.proc.poll() is None, daemon.log()[-5000:]
        filler.unlink()
        freed_at = datetime.now(UTC)
        wait_for(lambda: succeeded(proj.home, "tick", freed_at + timedelta(seconds=1)), 40, what="a run after")
        assert daemon.proc.poll() is None, daemon.log()[-5000:]
        log = daemon.log()
        assert "the store cannot answer" in log and "answers again" in log, log[-5000:]
        assert "Traceback" not in log, log[-5000:]
        assert daemon.stop() == 0, daemon.log()[-3000:]
    finally:
        if daemon.proc.poll() is None:
            daemon.stop()
    (instance,) = rows(proj.home, "SELECT * FROM serve_instance")
    assert instance["stopped_at"] is not None
    assert not [r for r in job_rows(proj.home, "tick") if r["status"] in ("running", "queued")]


# -- an empty jobs.yaml saved over a good one ------------------------------------------------------------
@pytest.mark.slow
def test_an_empty_jobs_yaml_is_refused_on_reload_and_alerted_once(project, receiver: Receiver):
    alerts_config(project, receiver)
    project.write_jobs("jobs:\n  tick:\n    schedule: every 1s\n    agent: false\n    pre_run: 'true'\n")
    from tests.web.webhelp import free_port

    port = free_port()
    daemon = ServeProc(project, "--web", f"127.0.0.1:{port}")
    try:
        daemon.started()
        wait_for(lambda: succeeded(project.home, "tick"), 20, what="a first run")
        project.jobs_path.write_text("")  # a truncate-then-write editor save, caught half-way
        wait_for(lambda: daemon.log().count("refused") >= 1, 15, what="the refusal")
        emptied = datetime.now(UTC)
        wait_for(lambda: succeeded(project.home, "tick", emptied + timedelta(seconds=2)), 15, what="fires go on")
        (alert,) = receiver.wait(1)
        refused = alert.json()
        assert refused["event"] == "reload_refused" and "no jobs" in refused["error"], refused
        overview = httpx.get(f"http://127.0.0.1:{port}/").text
        assert "refused" in overview and "no jobs" in overview, overview
        # the same content saved again is refused again, not alerted again
        project.jobs_path.write_text("")
        wait_for(lambda: daemon.log().count("refused") >= 2, 15, what="the second refusal")
        # an invalid edit is new content: refused, alerted
        project.jobs_path.write_text("jobs:\n  tick:\n    schedule: every often\n")
        wait_for(lambda: len(alerts(receiver, "reload_refused")) >= 2, 15, what="the invalid edit's alert")
        time.sleep(1.5)
        assert len(alerts(receiver, "reload_refused")) == 2, receiver.requests
        assert "job tick: schedule" in alerts(receiver, "reload_refused")[1]["error"]
        # saying so explicitly stops every job
        project.jobs_path.write_text("jobs: {}\n")
        daemon.wait_log("0 jobs")
        assert "refused" not in httpx.get(f"http://127.0.0.1:{port}/").text
        assert daemon.stop() == 0
    finally:
        if daemon.proc.poll() is None:
            daemon.stop()
    assert "Traceback" not in daemon.log()


# -- serve stopped with a run still waiting -----------------------------------------------------------------
@pytest.mark.slow
def test_runs_still_waiting_at_shutdown_are_alerted(project, serve, receiver: Receiver):
    alerts_config(project, receiver, max_parallel=1)  # type: ignore[arg-type]
    project.write_jobs(
        "jobs:\n  long:\n    schedule: every 1s\n    agent: false\n    pre_run: 'sleep 30'\n    overlap: queue\n"
    )
    daemon = serve().started()
    wait_for(
        lambda: {r["status"] for r in job_rows(project.home, "long")} >= {"running", "queued"}, 15, what="a queued run"
    )
    assert daemon.stop() == 0
    interrupted = {r["id"] for r in job_rows(project.home, "long") if r["reason"] == "shutdown"}
    waiting = {r["id"] for r in job_rows(project.home, "long") if r["started_at"] is None}
    assert waiting and waiting <= interrupted
    sent = [a["run_id"] for a in alerts(receiver, "failed")]  # sent before serve exited: no waiting here
    assert sorted(sent) == sorted(interrupted), (sent, interrupted)
