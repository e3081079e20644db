"""Alerts and delivery state through the real `runner run-job`: a failing run alerts its
``on_failure`` sinks, repeats are throttled, a success after failures is a recovery, a failed
delivery is visible (stderr, ledger, `runs list`, `jobs list`) and alerted, a SIGKILLed run is
alerted when the next command finds it ``unknown``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from runner.testing import error
from tests.receivers import Receiver
from tests.servehelp import rows, wait_for

FAST = "delivery: {attempts: 3, backoff: 0.05, max_backoff: 2, timeout: 5}\n"
KEY = "sk-test-key-0123456789abcdef"


def runs(project):
    """The ledger's rows, oldest first."""
    return rows(project.home, "SELECT * FROM runs ORDER BY created_at")


def config(project, text: str = "") -> None:
    project.home.mkdir(parents=True, exist_ok=True)
    (project.home / "config.yaml").write_text(FAST + text)


def test_failed_run_sends_a_redacted_alert_with_the_hint(project, fake, receiver: Receiver):
    config(project)
    fake.add(error(400, f"model 'x' does not exist (key {KEY})"))
    project.write_jobs(f"jobs:\n  one:\n    prompt: hi\n    on_failure: ['webhook:{receiver.url}/alerts']\n")
    res = project.run("run-job", "one")
    assert res.returncode == 1
    [row] = runs(project)
    [req] = receiver.wait(1)
    alert = req.json()
    assert alert["type"] == "alert" and alert["event"] == "failed"
    assert (alert["job"], alert["run_id"], alert["status"]) == ("one", row["id"], "failed")
    assert alert["reason"] == row["reason"] and "does not exist" in alert["error"]
    assert alert["hint"] == f"runner runs show {row['id']}"
    assert KEY not in req.body.decode() and "[REDACTED]" in alert["error"]
    assert req.headers["idempotency-key"] == f"{row['id']}:alert:failed:failed/{row['reason']}"


def test_throttle_then_recovery_from_config_alerts(project, fake, receiver: Receiver):
    config(project, f"alerts: ['webhook:{receiver.url}/a']\nalerts_throttle: {{every: 2, min_interval: 1h}}\n")
    project.write_jobs("jobs:\n  s:\n    agent: false\n    pre_run: 'echo partial; exit 3'\n")
    for _ in range(3):
        assert project.run("run-job", "s").returncode == 1
    sent = [r.json() for r in receiver.requests]
    ids = [r["id"] for r in runs(project)]
    assert [a["run_id"] for a in sent] == ids[:2]  # 1st, then every 2nd; the 3rd is held back
    assert "partial" in sent[0]["tail"] and sent[1]["note"] == "2 in a row"
    project.write_jobs("jobs:\n  s:\n    agent: false\n    pre_run: 'echo fine'\n")
    assert project.run("run-job", "s").returncode == 0
    recovered = receiver.wait(3)[2].json()
    assert recovered["event"] == "recovered" and recovered["status"] == "succeeded"
    assert recovered["note"] == "succeeded after 3 failed runs"
    assert project.run("run-job", "s").returncode == 0
    time.sleep(0.2)
    assert len(receiver.requests) == 3  # a second success is no news
    assert project.run("run-job", "s", "--no-deliver").returncode == 0


def test_failed_delivery_is_visible_and_alerted(project, fake, receiver: Receiver):
    dead = Receiver(script=[(500, {})] * 3).start()
    try:
        config(project)
        project.write_jobs(
            "jobs:\n  d:\n    agent: false\n    pre_run: 'echo report'\n"
            f"    deliver: [file, 'webhook:{dead.url}/x?token=abc123']\n"
            f"    on_failure: ['webhook:{receiver.url}/alerts']\n"
        )
        res = project.run("run-job", "d", "--json")
        assert res.returncode == 0, res.stderr
        assert f"delivery to webhook:{dead.url}/x?*** failed: HTTP 500 (gave up after 3 attempts)" in res.stderr
        summary = json.loads(res.stdout)
        assert summary["status"] == "succeeded" and summary["delivery_failed"] is True
        assert summary["delivery"][1] == {
            "sink": f"webhook:{dead.url}/x?***",
            "ok": False,
            "detail": summary["delivery"][1]["detail"],
        }
        [row] = runs(project)
        assert row["status"] == "succeeded" and row["delivery_failed"] == 1
        assert "abc123" not in row["delivery"]
        assert len(dead.requests) == 3
        [alert] = [r.json() for r in receiver.wait(1)]
        assert alert["event"] == "delivery_failed" and "HTTP 500" in alert["note"] and "abc123" not in alert["note"]
        listed = project.run("runs", "list")
        assert "DELIVERY" in listed.stdout and "FAILED" in listed.stdout
        only = json.loads(project.run("runs", "list", "--delivery-failed", "--json").stdout)
        assert [r["id"] for r in only] == [row["id"]]
        assert "(delivery FAILED)" in project.run("jobs", "list").stdout
        shown = project.run("runs", "show", row["id"]).stdout
        assert "webhook:" in shown and "FAILED HTTP 500" in shown and "abc123" not in shown
    finally:
        dead.stop()


def test_no_deliver_sends_nothing(project, fake, receiver: Receiver):
    config(project)
    project.write_jobs(
        "jobs:\n  n:\n    agent: false\n    pre_run: 'echo out; exit 1'\n"
        f"    deliver: ['webhook:{receiver.url}/out']\n    on_failure: ['webhook:{receiver.url}/alerts']\n"
    )
    assert project.run("run-job", "n", "--no-deliver").returncode == 1
    project.write_jobs(
        "jobs:\n  n:\n    agent: false\n    pre_run: 'echo out'\n"
        f"    deliver: ['webhook:{receiver.url}/out']\n    on_failure: ['webhook:{receiver.url}/alerts']\n"
    )
    assert project.run("run-job", "n", "--no-deliver").returncode == 0
    time.sleep(0.2)
    assert receiver.requests == []
    [_, row] = runs(project)
    assert row["output_path"] and row["delivery"] is None


def test_sigkilled_run_is_alerted_as_unknown_at_the_next_start(project, fake, receiver: Receiver):
    config(project, f"alerts: ['webhook:{receiver.url}/a']\n")
    project.write_jobs("jobs:\n  k:\n    agent: false\n    pre_run: 'echo started; sleep 5'\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", "run-job", "k"],
        env=project.env(),
        cwd=project.root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_for(lambda: [r for r in rows(project.home) if r["status"] == "running"], what="the run row")
        time.sleep(0.3)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    [row] = runs(project)
    assert row["status"] == "running"
    assert receiver.requests == []
    listed = project.run("runs", "list")  # any command opening the store recovers the row
    assert "unknown" in listed.stdout
    [req] = receiver.wait(1)
    alert = req.json()
    assert (alert["event"], alert["status"], alert["run_id"]) == ("failed", "unknown", row["id"])
    assert alert["reason"] == "worker_lost"
    project.run("runs", "list")
    time.sleep(0.2)
    assert len(receiver.requests) == 1  # found once, alerted once
