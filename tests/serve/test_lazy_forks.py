"""serve's warm forkserver runs only while a run is near (``serve.forkserver_idle_s``): the one
started with serve stops after the idle period and an idle serve then has none, a run starts it
again, a slot due within 30 s keeps it (or starts it) so the run still starts at its slot, and a
kill -9 of it is survived. A real serve each;
a run's pre_run writes its worker's pid (the shell's parent) to a file."""

from __future__ import annotations

import os
import signal
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from runner.host.procs import descendants, stat
from runner.serve.planner import JobState
from runner.serve.state import save_sight
from tests.servehelp import SERVE_CONFIG, job_rows, pid_alive, serve_factory, ts, wait_for

IDLE_S = 2.0


@pytest.fixture
def serve(project):
    yield from serve_factory(project)


def lazy_config(project) -> None:
    project.home.mkdir(parents=True, exist_ok=True)
    text = SERVE_CONFIG.format(max_parallel=4, shutdown_grace=3.0)
    # one process per run: no reusable worker idles on (and keeps the forkserver up) after a run
    text += f"  worker_max_runs: 1\n  forkserver_idle_s: {IDLE_S}\n"
    (project.home / "config.yaml").write_text(text)


def jobs_due(project, slots: dict[str, datetime]) -> None:
    """Script-only jobs (every hour) whose next slot is the one given; each records its worker."""
    pre_run = f"'echo $PPID >> {project.root}/pids'"
    project.write_jobs(
        "jobs:\n"
        + "".join(f"  {name}:\n    schedule: every 3600s\n    agent: false\n    pre_run: {pre_run}\n" for name in slots)
    )
    store = project.open_store()
    for name, slot in slots.items():
        save_sight(
            store,
            JobState(name, "every 3600s", first_seen=slot - timedelta(days=1), last_slot=slot - timedelta(hours=1), resolved_at=slot),
        )
    store.close()


def forkservers(serve_pid: int) -> list[int]:
    """serve's children that are the warm forkserver."""
    out = []
    for pid in descendants(serve_pid):
        st = stat(pid)
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if st is not None and st.ppid == serve_pid and b"runner.run.forks" in cmdline:
            out.append(pid)
    return out


def worker_pids(project) -> list[int]:
    path = project.root / "pids"
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def succeeded(project, job: str, count: int = 1):
    done = [r for r in job_rows(project.home, job) if r["status"] == "succeeded"]
    return done if len(done) >= count else None


def test_an_idle_serve_stops_its_forkserver_and_a_trigger_starts_one_that_stops_again(project, serve) -> None:
    lazy_config(project)
    jobs_due(project, {"far": datetime.now(UTC) + timedelta(hours=1)})
    daemon = serve()
    # started with serve, before its start-up (a run due at the start finds it ready); its idle time
    # counts from then, so on a loaded machine it may stop before "serve started" is logged
    (first,) = wait_for(lambda: forkservers(daemon.pid), timeout=20, interval=0.02, what="serve's forkserver")
    daemon.started()
    wait_for(lambda: not forkservers(daemon.pid), timeout=IDLE_S + 10, what="the forkserver to stop when idle")
    wait_for(lambda: not pid_alive(first), timeout=15, what="the stopped forkserver to be reaped")
    time.sleep(1.0)  # a few rounds of serve's loop: nothing is near, nothing starts it
    assert forkservers(daemon.pid) == []
    assert project.run("jobs", "trigger", "far").returncode == 0
    (row,) = wait_for(lambda: succeeded(project, "far"), timeout=30, what="the triggered run")
    assert len(worker_pids(project)) == 1  # its worker ran: forked from a forkserver started for it
    wait_for(lambda: not forkservers(daemon.pid), timeout=IDLE_S + 10, what="the forkserver to stop when idle")
    assert "Traceback" not in daemon.log()
    assert daemon.stop() == 0


def test_a_stopped_forkserver_starts_30_s_before_a_slot_and_is_kept_until_its_run(project, serve) -> None:
    """The slot is 48 s after the start (serve's start and the idle stop may take 15 s on a loaded machine): the forkserver started with serve stops when idle, starts
    again once the slot is within 30 s, is kept although idle for longer than IDLE_S, and the run
    finds it ready."""
    lazy_config(project)
    t0 = (datetime.now(UTC) + timedelta(seconds=48)).replace(microsecond=0)
    jobs_due(project, {"soon": t0, "far": datetime.now(UTC) + timedelta(hours=1)})
    daemon = serve().started()
    wait_for(lambda: not forkservers(daemon.pid), timeout=IDLE_S + 10, what="the forkserver to stop when idle")
    assert datetime.now(UTC) < t0 - timedelta(seconds=30)  # stopped while the slot was more than 30 s away
    ahead = wait_for(lambda: forkservers(daemon.pid), timeout=50, what="the forkserver to start ahead of the slot")
    started = datetime.now(UTC)
    assert t0 - timedelta(seconds=31) < started < t0 - timedelta(seconds=20)
    while datetime.now(UTC) < t0 - timedelta(seconds=0.5):
        assert forkservers(daemon.pid) == ahead  # idle for longer than IDLE_S, but the run is near: kept
        time.sleep(0.2)
    (row,) = wait_for(lambda: succeeded(project, "soon"), timeout=30, what="the run at its slot")
    assert ts(row["slot"]) == t0
    assert (ts(row["started_at"]) - t0).total_seconds() < 5
    assert forkservers(daemon.pid) in ([], ahead)  # the same one (or already stopped again)
    wait_for(lambda: not forkservers(daemon.pid), timeout=IDLE_S + 10, what="the forkserver to stop when idle")
    assert daemon.stop() == 0


def test_a_killed_forkserver_is_replaced_for_the_next_run(project, serve) -> None:
    lazy_config(project)
    jobs_due(project, {"far": datetime.now(UTC) + timedelta(hours=1)})
    (project.home / "config.yaml").write_text(
        (project.home / "config.yaml").read_text().replace(f"forkserver_idle_s: {IDLE_S}", "forkserver_idle_s: 600")
    )
    daemon = serve().started()
    assert project.run("jobs", "trigger", "far").returncode == 0
    wait_for(lambda: succeeded(project, "far"), timeout=30, what="the first run")
    (first,) = forkservers(daemon.pid)  # kept: idle for less than 600 s
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: not pid_alive(first), timeout=10, what="the forkserver to die")
    assert project.run("jobs", "trigger", "far").returncode == 0
    wait_for(lambda: succeeded(project, "far", 2), timeout=30, what="the run after the kill")
    assert len(set(worker_pids(project))) == 2
    (second,) = forkservers(daemon.pid)
    assert second != first
    assert daemon.proc.poll() is None
    assert daemon.stop() == 0
