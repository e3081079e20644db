"""Reusable workers (runner.serve.reuse) under a real serve: script-only runs share worker
processes, each worker is replaced after ``serve.worker_max_runs``, a stopped run's worker takes
no other run, and a worker that died while idle is replaced. Each run's pre_run writes its
worker's pid (the shell's parent) to a file, so the tests see which process ran what."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from runner.host.procs import descendants, stat
from runner.serve.launcher import Kept
from runner.settings import Settings
from runner.store import Store
from tests.serve.test_burst import burst, ended
from tests.servehelp import job_rows, pid_alive, rows, serve_factory, wait_for, write_config


@pytest.fixture
def serve(project):
    yield from serve_factory(project)


def pids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def record_pid(project) -> str:
    return f"'echo $PPID >> {project.root}/pids'"


def test_script_only_runs_share_workers_each_replaced_after_worker_max_runs(project, serve):
    write_config(project, max_parallel=2, worker_max_runs=4)
    burst(project, 12, record_pid(project), lead=5)
    daemon = serve().started()
    done = wait_for(lambda: ended(project, 12), timeout=60, what="every run to end")
    assert {r["status"] for r in done} == {"succeeded"}
    seen = pids(project.root / "pids")
    per_worker = Counter(seen)
    assert len(seen) == 12
    assert max(per_worker.values()) <= 4, per_worker  # worker_max_runs
    assert 3 <= len(per_worker) < 12, per_worker  # reused, and replaced: 12 runs / 4 per worker at least
    assert os.getpid() not in per_worker and daemon.pid not in per_worker
    assert daemon.stop() == 0
    for pid in per_worker:  # serve closed their channels: no worker outlives it
        wait_for(lambda pid=pid: not pid_alive(pid), timeout=10, what=f"worker {pid} to exit")


def test_with_worker_max_runs_1_every_run_has_a_process_of_its_own(project, serve):
    write_config(project, max_parallel=2, worker_max_runs=1)
    burst(project, 6, record_pid(project), lead=5)
    daemon = serve().started()
    done = wait_for(lambda: ended(project, 6), timeout=60, what="every run to end")
    assert {r["status"] for r in done} == {"succeeded"}
    assert len(set(pids(project.root / "pids"))) == 6
    assert daemon.stop() == 0


def test_a_timed_out_runs_worker_takes_no_other_run(project, serve):
    write_config(project, max_parallel=1, worker_max_runs=100)
    root = project.root
    project.write_jobs(
        "jobs:\n"
        "  slow:\n    agent: false\n    timeout: 1s\n"
        f"    pre_run: 'echo $PPID >> {root}/slow; sleep 30'\n"
        + "".join(f"  q{i}:\n    agent: false\n    pre_run: 'echo $PPID >> {root}/quick'\n" for i in range(3))
    )
    daemon = serve().started()
    for name in ("slow", "q0", "q1", "q2"):  # queued in this order behind one slot
        assert project.run("jobs", "trigger", name).returncode == 0
    wait_for(lambda: len(pids(root / "quick")) == 3, timeout=30, what="the quick runs")
    [slow] = wait_for(lambda: [r for r in job_rows(project.home, "slow") if r["ended_at"]], timeout=30)
    assert (slow["status"], slow["reason"]) == ("timed_out", "timeout")
    [slow_worker] = pids(root / "slow")
    quick = pids(root / "quick")
    assert slow_worker not in quick, (slow_worker, quick)  # a signalled worker never takes another run
    assert len(set(quick)) == 1  # the quick ones share the next worker
    wait_for(lambda: not pid_alive(slow_worker), timeout=10, what="the stopped worker to exit")
    assert daemon.stop() == 0
    assert rows(project.home, "SELECT * FROM runs WHERE status IN ('queued', 'running')") == []


def test_what_a_run_left_behind_ends_before_its_worker_takes_the_next(project, serve):
    write_config(project, max_parallel=1, worker_max_runs=100)
    root = project.root
    project.write_jobs(
        "jobs:\n"
        "  leaves:\n    agent: false\n"
        f"    pre_run: 'echo $PPID >> {root}/pids; env -i setsid sleep 300 > /dev/null 2>&1 & echo $! > {root}/orphan'\n"
        f"  next:\n    agent: false\n    pre_run: 'echo $PPID >> {root}/pids'\n"
    )
    daemon = serve().started()
    assert project.run("jobs", "trigger", "leaves").returncode == 0
    wait_for(lambda: [r for r in job_rows(project.home, "leaves") if r["ended_at"]], timeout=30)
    orphan = int((root / "orphan").read_text())
    wait_for(lambda: not pid_alive(orphan), timeout=10, what="the run's orphan to be ended")
    assert project.run("jobs", "trigger", "next").returncode == 0
    [run] = wait_for(lambda: [r for r in job_rows(project.home, "next") if r["ended_at"]], timeout=30)
    assert run["status"] == "succeeded"
    first, second = pids(root / "pids")
    assert first == second  # the same worker, after the orphan was gone
    assert daemon.stop() == 0


def test_an_idle_worker_that_died_is_replaced(project, serve):
    write_config(project, max_parallel=2, worker_max_runs=100)
    root = project.root
    project.write_jobs(f"jobs:\n  t:\n    agent: false\n    pre_run: 'echo $PPID >> {root}/pids'\n")
    daemon = serve().started()

    def runs_ended(n: int) -> list[dict] | None:
        done = [r for r in job_rows(project.home, "t") if r["ended_at"]]
        return done if len(done) >= n else None

    assert project.run("jobs", "trigger", "t").returncode == 0
    wait_for(lambda: runs_ended(1), timeout=30)
    assert project.run("jobs", "trigger", "t").returncode == 0
    wait_for(lambda: runs_ended(2), timeout=30)
    first, again = pids(root / "pids")
    assert first == again  # reused while idle
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: not pid_alive(first), timeout=10)
    assert project.run("jobs", "trigger", "t").returncode == 0
    done = wait_for(lambda: runs_ended(3), timeout=30)
    assert {r["status"] for r in done} == {"succeeded"}
    assert pids(root / "pids")[2] != first
    assert daemon.stop() == 0


def test_workers_for_a_burst_are_started_and_warmed_before_the_slot(project, serve):
    write_config(project, max_parallel=4, worker_max_runs=100)
    # a slot 15 s ahead: serve looks 10 s ahead, which leaves its start-up (seconds on a loaded
    # machine) out of the time the workers have to start before the slot
    t0 = burst(project, 8, record_pid(project), lead=15)
    daemon = serve().started()

    def workers() -> set[int]:
        tree = descendants(daemon.pid)
        forkserver = {pid for pid in tree if (st := stat(pid)) is not None and st.ppid == daemon.pid}
        # the forkserver's children: the workers started so far (not a warm-up's `sh`, a grandchild)
        return {pid for pid in tree if (st := stat(pid)) is not None and st.ppid in forkserver}

    before = workers()
    while len(before) < 4 and datetime.now(UTC) < t0 - timedelta(seconds=0.5):
        time.sleep(0.1)
        before = workers()
    done = wait_for(lambda: ended(project, 8), timeout=60, what="every run to end")
    assert {r["status"] for r in done} == {"succeeded"}
    used = set(pids(project.root / "pids"))
    assert used <= before, (used, before)  # every run went to a worker started ahead of its slot
    assert len(used) == 4 == len(before)  # max_parallel of them, no more
    assert {r["job"] for r in rows(project.home)} == {f"j{i:03d}" for i in range(8)}  # the warm-ups wrote nothing here
    assert daemon.stop() == 0


def test_a_run_on_a_reused_worker_sees_its_cancel_and_the_worker_takes_no_more(project, serve):
    """The worker's one cancel watcher follows each run it takes: the second run on a worker is
    cancelled by ``runner runs cancel`` like any other, and the worker then retires."""
    write_config(project, max_parallel=1, worker_max_runs=100)
    root = project.root
    project.write_jobs(
        "jobs:\n"
        f"  first:\n    agent: false\n    pre_run: 'echo $PPID >> {root}/pids'\n"
        f"  second:\n    agent: false\n    pre_run: 'echo $PPID >> {root}/pids; sleep 3'\n"
        f"  third:\n    agent: false\n    pre_run: 'echo $PPID >> {root}/pids'\n"
    )
    daemon = serve().started()
    assert project.run("jobs", "trigger", "first").returncode == 0
    wait_for(lambda: [r for r in job_rows(project.home, "first") if r["ended_at"]], timeout=30)
    assert project.run("jobs", "trigger", "second").returncode == 0
    wait_for(lambda: len(pids(root / "pids")) == 2, timeout=30, what="the second run's command")
    [run] = job_rows(project.home, "second")
    assert project.run("runs", "cancel", run["id"]).returncode == 0
    [run] = wait_for(lambda: [r for r in job_rows(project.home, "second") if r["ended_at"]], timeout=30)
    assert (run["status"], run["reason"]) == ("interrupted", "cancelled"), run
    assert project.run("jobs", "trigger", "third").returncode == 0
    [run] = wait_for(lambda: [r for r in job_rows(project.home, "third") if r["ended_at"]], timeout=30)
    assert run["status"] == "succeeded"
    first, second, third = pids(root / "pids")
    assert first == second != third  # the second run was the worker's second; a cancelled run's worker retires
    wait_for(lambda: not pid_alive(first), timeout=10, what="the cancelled run's worker to exit")
    assert daemon.stop() == 0


@pytest.mark.sqlite_only("a SQLite file moved aside under the worker")
def test_a_worker_keeps_its_store_while_runs_succeed_and_the_file_is_the_same(tmp_path):
    """In-process: what a reusable worker keeps (``Kept``) is the store it opened, until a run
    does not succeed or the SQLite file at the path is another one (moved aside, restored)."""
    home = tmp_path / "home"
    home.mkdir()
    Store.open(home / "runner.db").close()
    settings = Settings(home=home, jobs_path=tmp_path / "jobs.yaml", config_path=home / "config.yaml")
    kept = Kept()
    try:
        first = kept.store(settings)
        kept.after(0)
        assert kept.store(settings) is first  # a run succeeded: the next one uses the same store
        kept.after(1)
        second = kept.store(settings)
        assert second is not first  # a run that did not succeed gave it up
        second.one("SELECT 1")
        (home / "runner.db").rename(home / "old.db")
        Store.open(home / "runner.db").close()
        third = kept.store(settings)
        assert third is not second
        assert third.one("SELECT COUNT(*) AS n FROM runs") == {"n": 0}
        watcher = kept.cancels(third)
        assert kept.cancels(third) is watcher
    finally:
        kept.close()
