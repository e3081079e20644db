"""A run under a paused serve (SIGSTOP) still ends at its own ``timeout:`` (issue 37): the run
process enforces it, kills its pre_run's tree and alerts; the resumed serve reaps it without a
second alert and keeps scheduling."""

from __future__ import annotations

import signal
import time

import pytest

from tests.receivers import Receiver
from tests.run.test_timeouts import marker, sleeping
from tests.servehelp import job_rows, serve_factory, ts, wait_for, write_config


@pytest.fixture
def serve(project):
    yield from serve_factory(project)


def test_timeout_holds_while_serve_is_paused(project, serve, receiver: Receiver):
    write_config(project)
    with open(project.home / "config.yaml", "a") as fh:
        fh.write(f"alerts: ['webhook:{receiver.url}/a']\n")
    mark = marker()
    project.write_jobs(
        f"jobs:\n  slow:\n    schedule: in 1s\n    agent: false\n    timeout: 3s\n"
        f"    pre_run: 'sleep {mark} & sleep {mark}; echo done'\n"
    )
    daemon = serve().started()
    wait_for(lambda: sleeping(mark), 20, what="the run's pre_run to start")
    daemon.send(signal.SIGSTOP)
    try:
        paused = time.monotonic()
        row = wait_for(
            lambda: [r for r in job_rows(project.home, "slow") if r["status"] not in ("queued", "running")],
            15,
            what="the run to end while serve is paused",
        )[0]
        assert time.monotonic() - paused < 10
        assert row["status"] == "timed_out" and row["reason"] == "timeout", row
        assert "timeout of 3s" in row["error"]
        ran = (ts(row["ended_at"]) - ts(row["started_at"])).total_seconds()
        assert 2.5 < ran < 6, ran
        wait_for(lambda: not sleeping(mark), 5, what="the pre_run's sleeps to be gone")
        receiver.wait(1, timeout=10)  # the run alerted by itself: serve cannot
    finally:
        daemon.send(signal.SIGCONT)
    alert = receiver.requests[0].json()
    assert alert["status"] == "timed_out" and alert["run_id"] == row["id"]
    daemon.wait_log(f"finished slow run {row['id']}: timed_out")
    time.sleep(1.0)
    assert len(receiver.requests) == 1, [r.json() for r in receiver.requests]  # serve did not alert it again
    (after,) = job_rows(project.home, "slow")
    assert after["status"] == "timed_out" and after["reason"] == "timeout"
    assert daemon.stop() == 0
