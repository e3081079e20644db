"""A serve killed with kill -9 leaves its runs' processes going; the serve started after it adopts
them (by pid and start time on this host): the job's timeout still ends them, and `overlap: skip`
counts them, so the next slot never runs beside one (issue 37, finding 5)."""

from __future__ import annotations

import signal
import time

import pytest

from tests.servehelp import job_rows, pid_alive, serve_factory, ts, wait_for, write_config


@pytest.fixture
def serve(project):
    yield from serve_factory(project)


def test_a_restarted_serve_adopts_the_run_its_killed_predecessor_left(project, serve):
    write_config(project)
    project.write_jobs(
        "jobs:\n  long:\n    schedule: every 2s\n    agent: false\n    overlap: skip\n"
        "    timeout: 25s\n    pre_run: 'sleep 60'\n"
    )
    first = serve().started()
    row = wait_for(lambda: [r for r in job_rows(project.home, "long") if r["status"] == "running"], 15)[0]
    first.stop(signal.SIGKILL)  # the run's process goes on without its serve
    assert pid_alive(row["pid"])
    time.sleep(1)
    second = serve().started(timeout=60)  # it waits out the dead leader's lease first
    second.wait_log(f"adopted run {row['id']}", timeout=30)
    # the run ends by its own timeout, 25 s after it started: how long after the adoption depends
    # on how long the new serve waited for the lease (seconds on SQLite, almost none on PostgreSQL)
    ended = wait_for(
        lambda: [r for r in job_rows(project.home, "long") if r["id"] == row["id"] and r["status"] != "running"], 25 + 15
    )[0]
    assert ended["status"] == "timed_out" and ended["reason"] == "timeout", ended
    took = (ts(ended["ended_at"]) - ts(ended["started_at"])).total_seconds()
    assert took < 25 + 6, took  # its timeout held across the restart (plus the kill grace)
    wait_for(lambda: not pid_alive(row["pid"]), 10, what="the adopted run's process to be gone")
    # no other run of the job ran beside it: every later one started after it ended
    later = [r for r in job_rows(project.home, "long") if r["started_at"] and r["id"] != row["id"]]
    assert all(ts(r["started_at"]) >= ts(ended["ended_at"]) for r in later), later
    assert any(r["reason"] == "overlap" for r in job_rows(project.home, "long")), "no slot was skipped for overlap"
    assert second.stop() == 0
