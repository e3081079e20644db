"""`runner serve` as a real daemon: fires on time, one instance, ledger identity, hot reload,
shutdown, timeouts, dead workers, `in` one-shots across restarts."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time

import pytest

from tests.servehelp import job_rows, pid_alive, rows, serve_factory, ts, wait_for, write_config


@pytest.fixture
def serve(project):
    yield from serve_factory(project)


TICK = """
jobs:
  tick:
    schedule: every 1s
    agent: false
    pre_run: "echo tick"
"""


def test_fires_on_time_and_reports_health(project, serve):
    write_config(project)
    project.write_jobs(TICK)
    daemon = serve().started()
    done = wait_for(lambda: [r for r in job_rows(project.home, "tick") if r["status"] == "succeeded"][3:], 15)
    for row in done:
        late = (ts(row["started_at"]) - ts(row["slot"])).total_seconds()
        assert 0 <= late < 1.0, row  # typically ~20 ms; loose for loaded CI machines
        assert row["trigger"] == "schedule" and row["waited_s"] < 0.2
    slots = [ts(r["slot"]) for r in done]
    assert all(round((b - a).total_seconds(), 3) == 1.0 for a, b in zip(slots, slots[1:], strict=False))
    listed = json.loads(project.cli("jobs", "list", "--json").output)[0]
    assert listed["serve_alive"] is True and listed["last_status"] in ("succeeded", "running", "queued")
    assert ts(listed["next_fire"]) > slots[-1]
    assert "serve: running (pid" in project.cli("jobs", "list").output
    assert daemon.stop() == 0
    assert "serve stopped" in daemon.log()
    assert "fired tick" in (project.home / "logs" / "serve.log").read_text()
    assert "serve: not running" in project.cli("jobs", "list").output


def test_second_serve_is_refused(project, serve):
    write_config(project)
    project.write_jobs(TICK)
    first = serve().started()
    res = project.run("serve", timeout=30)
    assert res.returncode == 2
    assert f"already running (pid {first.pid})" in res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert first.proc.poll() is None
    assert first.stop() == 0


@pytest.mark.slow
def test_unique_slot_even_with_the_lock_bypassed(project, serve):
    """Two serves on one RUNNER_HOME (the lock file deleted under the first): the second stands
    by on the scheduler lease (issue 17) and takes over when the first stops; every slot still
    gets exactly one row and runs once. (Two schedulers writing one slot at the same moment:
    tests/dist/test_standby.py.)"""
    write_config(project)
    project.write_jobs(TICK)
    a = serve().started()
    wait_for(lambda: job_rows(project.home, "tick"), 10)
    (project.home / "run" / "serve.lock").unlink()
    b = serve()
    b.wait_log("standing by")
    time.sleep(1.5)
    assert "serve started" not in b.log()
    assert a.stop() == 0
    b.started()
    b.wait_log("this serve leads now")
    time.sleep(2.0)
    assert b.stop() == 0
    all_rows = job_rows(project.home, "tick")
    slots = [(r["slot"], r["attempt"]) for r in all_rows]
    assert len(slots) == len(set(slots)) >= 4
    ran = [r for r in all_rows if r["status"] == "succeeded"]
    outputs = list((project.home / "outputs" / "tick").glob("*.md"))
    assert len(outputs) == len(ran)
    db = project.db()
    first = all_rows[0]
    try:
        db.execute(
            "INSERT INTO runs (id, job, slot, trigger, status, created_at, attempt) VALUES ('x', ?, ?, 'schedule', 'queued', 'now', 1)",
            (first["job"], first["slot"]),
        )
        raise AssertionError("duplicate (job, slot) accepted")
    except sqlite3.IntegrityError:
        pass


@pytest.mark.slow
def test_hot_reload_add_remove_invalid_and_sighup(project, serve):
    write_config(project)
    project.write_jobs(TICK)
    project.write("jobs/b.sh", "echo b\n", mode=0o755)
    daemon = serve().started()
    wait_for(lambda: job_rows(project.home, "tick"), 10)
    project.write_jobs(TICK.replace("tick:", "bbbb:").replace('"echo tick"', "jobs/b.sh"))
    wait_for(lambda: job_rows(project.home, "bbbb"), 15, what="the added job to fire")  # loaded machines: slack
    daemon.wait_log("reloaded")
    removed_at = len(job_rows(project.home, "tick"))
    time.sleep(1.5)
    assert len(job_rows(project.home, "tick")) <= removed_at + 1  # at most one fire already in flight
    # an invalid edit: logged, the last good jobs keep firing
    good = project.jobs_path.read_text()
    project.jobs_path.write_text(good.replace("agent: false", "agent: false\n    colour: blue"))
    daemon.wait_log("still running the last good jobs", 15)
    assert "colour: unknown key" in daemon.log()
    before = len(job_rows(project.home, "bbbb"))
    wait_for(lambda: len(job_rows(project.home, "bbbb")) > before + 1, 15, what="bbbb to keep firing")
    # an edited referenced script is picked up too
    reloads = daemon.log().count("reloaded")
    project.jobs_path.write_text(good)
    wait_for(lambda: daemon.log().count("reloaded") > reloads, 15)
    reloads = daemon.log().count("reloaded")
    project.write("jobs/b.sh", "echo b2\n", mode=0o755)
    wait_for(lambda: daemon.log().count("reloaded") > reloads, 15, what="a reload after the script changed")
    # SIGHUP reloads even when the poll cannot see a change (same size, mtime put back)
    st = os.stat(project.jobs_path)
    project.jobs_path.write_text(good.replace("bbbb:", "cccc:"))
    os.utime(project.jobs_path, ns=(st.st_atime_ns, st.st_mtime_ns))
    time.sleep(1.5)
    assert not job_rows(project.home, "cccc")
    daemon.send(signal.SIGHUP)
    wait_for(lambda: job_rows(project.home, "cccc"), 15, what="cccc after SIGHUP")
    assert daemon.proc.poll() is None
    assert daemon.stop() == 0


def test_reload_logs_what_jobs_validate_finds_and_keeps_the_jobs(project, serve):
    write_config(project)
    project.write_jobs(TICK)
    daemon = serve().started()
    wait_for(lambda: job_rows(project.home, "tick"), 10)
    project.write_jobs(TICK + "  greet:\n    prompt: 'hi {{ vars.who }}'\n    model: [default, ghost]\n")
    daemon.wait_log("reloaded", 15)
    log = daemon.log()
    assert "job greet: prompt: line 1: vars.who is not defined" in log
    assert "job greet: model: unknown provider 'ghost'" in log
    before = len(job_rows(project.home, "tick"))
    wait_for(lambda: len(job_rows(project.home, "tick")) > before, 15, what="tick to keep firing")
    assert daemon.stop() == 0


def test_sigterm_interrupts_running_worker(project, serve):
    write_config(project, shutdown_grace=3)
    project.write("jobs/long.sh", "echo $$ > long.pid\nexec sleep 60\n", mode=0o755)
    project.write_jobs("jobs:\n  long:\n    schedule: in 1s\n    agent: false\n    pre_run: jobs/long.sh\n")
    daemon = serve().started()
    pid_file = project.root / "long.pid"
    wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 10)
    child = int(pid_file.read_text())
    started = time.monotonic()
    assert daemon.stop() == 0
    assert time.monotonic() - started < 3 + 10  # the 3 s shutdown grace, not the run's 60 s sleep
    (row,) = job_rows(project.home, "long")
    assert row["status"] == "interrupted" and row["reason"] == "shutdown", row
    assert not pid_alive(child) and not pid_alive(row["pid"])


def test_timeout_kills_worker_and_its_children(project, serve):
    write_config(project)
    project.write(
        "jobs/hang.sh",
        "sleep 300 &\necho $! > bg.pid\necho $$ > fg.pid\nexec sleep 300\n",
        mode=0o755,
    )
    project.write_jobs(
        "jobs:\n  hang:\n    schedule: in 1s\n    agent: false\n    timeout: 1s\n    pre_run: jobs/hang.sh\n"
    )
    daemon = serve().started()
    row = wait_for(lambda: [r for r in job_rows(project.home, "hang") if r["status"] == "timed_out"], 10)[0]
    assert row["reason"] == "timeout" and "timeout of 1s" in row["error"]
    elapsed = (ts(row["ended_at"]) - ts(row["started_at"])).total_seconds()
    assert 0.9 < elapsed < 4
    pids = [int((project.root / name).read_text()) for name in ("bg.pid", "fg.pid")] + [row["pid"]]
    wait_for(lambda: not any(pid_alive(p) for p in pids), 10, what="the worker and its children to be gone")
    assert daemon.stop() == 0


def test_dead_worker_is_failed_with_its_signal(project, serve):
    write_config(project)
    # $PPID: the worker, whose bash runs the command
    project.write_jobs(
        'jobs:\n  boom:\n    schedule: in 1s\n    agent: false\n    pre_run: "sleep 60 & echo $! > left.pid; kill -9 $PPID; wait"\n'
    )
    daemon = serve().started()
    row = wait_for(lambda: [r for r in job_rows(project.home, "boom") if r["status"] not in ("queued", "running")], 10)[
        0
    ]
    assert row["status"] == "failed" and row["reason"] == "worker_died", row
    assert "signal SIGKILL" in row["error"]
    # what the dead worker's command started does not go on unsupervised
    left = int((project.root / "left.pid").read_text())
    wait_for(lambda: not pid_alive(left), 5, what="the dead worker's command to be killed")
    assert daemon.stop() == 0


def test_in_one_shot_survives_restart(project, serve):
    write_config(project)
    project.write_jobs("jobs:\n  later:\n    schedule: in 2h\n    agent: false\n    pre_run: echo later\n")
    first = serve().started()
    (state,) = rows(project.home, "SELECT * FROM job_state WHERE job='later'")
    resolved = ts(state["resolved_at"])
    assert first.stop() == 0
    time.sleep(1.1)
    second = serve().started()
    (again,) = rows(project.home, "SELECT * FROM job_state WHERE job='later'")
    assert ts(again["resolved_at"]) == resolved
    listed = json.loads(project.cli("jobs", "list", "--json").output)[0]
    assert ts(listed["next_fire"]) == resolved.replace(microsecond=0)
    nxt = json.loads(project.cli("jobs", "next", "later", "--json").output)
    assert [ts(r["utc"]) for r in nxt] == [resolved]
    assert second.stop() == 0
    assert not job_rows(project.home, "later")


def test_invalid_jobs_at_start_is_exit_2(project):
    project.write_jobs("jobs:\n  a:\n    schedule: every 1s\n    agent: false\n    pre_run: echo a\n    colour: blue\n")
    res = project.run("serve", timeout=30)
    assert res.returncode == 2
    assert "colour: unknown key" in res.stderr and "Traceback" not in res.stderr
