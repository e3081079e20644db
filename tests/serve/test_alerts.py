"""Alerts from a real `runner serve`: a job failing slot after slot is alerted (throttled), its
pause by ``pause_after_failures`` is alerted, and the first success after resuming is a recovery;
a run serve stops at its timeout is alerted once as ``timed_out``."""

from __future__ import annotations

import time

import pytest

from tests.receivers import Receiver
from tests.servehelp import job_rows, serve_factory, wait_for, write_config


@pytest.fixture
def serve(project):
    yield from serve_factory(project)


def alerts_config(project, receiver: Receiver, throttle: str = "{every: 1, min_interval: 1h}") -> None:
    write_config(project)
    with open(project.home / "config.yaml", "a") as fh:
        fh.write(f"alerts: ['webhook:{receiver.url}/a']\nalerts_throttle: {throttle}\n")
        fh.write("delivery: {attempts: 2, backoff: 0.05}\n")


def events(receiver: Receiver) -> list[tuple[str, str]]:
    return [(r.json()["event"], r.json()["run_id"]) for r in receiver.requests]


@pytest.mark.slow
def test_pause_alert_then_recovery_after_resume(project, serve, receiver: Receiver):
    alerts_config(project, receiver)
    project.write_jobs(
        "jobs:\n  bad:\n    schedule: every 1s\n    agent: false\n    pre_run: 'test -f ok.flag'\n"
        "    pause_after_failures: 2\n"
    )
    daemon = serve().started()
    receiver.wait(3, timeout=20)
    failed = [r["id"] for r in job_rows(project.home, "bad")]
    assert len(failed) == 2
    got = events(receiver)
    assert sorted(got) == sorted([("failed", failed[0]), ("failed", failed[1]), ("paused", failed[1])])
    paused = next(r.json() for r in receiver.requests if r.json()["event"] == "paused")
    assert "paused after 2 consecutive failed slots" in paused["note"]
    assert "runner jobs resume bad" in paused["note"]
    (project.root / "ok.flag").write_text("")
    assert project.cli("jobs", "resume", "bad").exit_code == 0
    wait_for(lambda: len(receiver.requests) >= 4, 15, what="the recovery alert")
    recovered = receiver.requests[3].json()
    assert recovered["event"] == "recovered" and recovered["note"] == "succeeded after 2 failed runs"
    time.sleep(1.5)
    assert len(receiver.requests) == 4  # later successes are no news
    assert daemon.stop() == 0


@pytest.mark.slow
def test_worker_timeout_alert(project, serve, receiver: Receiver):
    alerts_config(project, receiver)
    project.write_jobs(
        "jobs:\n  slow:\n    schedule: every 2s\n    agent: false\n    pre_run: 'sleep 30'\n    timeout: 1s\n"
    )
    daemon = serve().started()
    req = receiver.wait(1, timeout=20)[0]  # the next slot's run may time out and be alerted meanwhile
    alert = req.json()
    assert alert["event"] == "failed" and alert["status"] == "timed_out"
    row = next(r for r in job_rows(project.home, "slow") if r["id"] == alert["run_id"])
    assert row["status"] == "timed_out"
    daemon.stop()
    time.sleep(0.5)
    assert [r.json()["run_id"] for r in receiver.requests].count(alert["run_id"]) == 1


@pytest.mark.slow
def test_shutdown_interrupting_a_run_is_alerted_before_serve_exits(project, serve, receiver: Receiver):
    alerts_config(project, receiver)
    project.write_jobs("jobs:\n  long:\n    schedule: every 1s\n    agent: false\n    pre_run: 'sleep 30'\n")
    daemon = serve().started()
    wait_for(lambda: [r for r in job_rows(project.home, "long") if r["status"] == "running"], 10, what="a running run")
    assert daemon.stop() == 0
    alerts = [r.json() for r in receiver.requests]  # sent before serve exited: no waiting here
    assert alerts and {(a["status"], a["reason"]) for a in alerts} == {("interrupted", "shutdown")}
    interrupted = {r["id"] for r in job_rows(project.home, "long") if r["reason"] == "shutdown"}
    assert {a["run_id"] for a in alerts} <= interrupted
