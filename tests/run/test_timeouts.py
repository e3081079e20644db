"""A run enforces its own ``timeout:`` (issue 37): `runner run-job` of a script-only job whose
pre_run outlives the timeout ends ``timed_out`` on time with the script's whole tree killed, no
serve needed; an agent job's pre_run counts against the same deadline (no model call after it)."""

from __future__ import annotations

import json
import time

from tests.servehelp import marker, rows, sleeping, wait_for


def test_run_job_script_past_its_timeout(project):
    mark = marker()
    project.write_jobs(
        f"jobs:\n  slow:\n    agent: false\n    timeout: 3s\n    pre_run: 'sleep {mark} & sleep {mark}; echo done'\n"
    )
    started = time.monotonic()
    res = project.run("run-job", "slow", "--json", timeout=90)
    took = time.monotonic() - started
    out = json.loads(res.stdout)
    assert res.returncode == 1, res.stderr
    assert out["status"] == "timed_out" and out["reason"] == "timeout", out
    assert "timeout of 3s" in out["error"]
    assert took < 12, f"run-job took {took:.1f}s for a 3s timeout"
    (row,) = rows(project.home, "SELECT * FROM runs")
    assert row["status"] == "timed_out" and row["reason"] == "timeout"
    from datetime import datetime

    ran = (datetime.fromisoformat(row["ended_at"]) - datetime.fromisoformat(row["started_at"])).total_seconds()
    assert 2.5 < ran < 5, ran
    wait_for(lambda: not sleeping(mark), 5, what="the pre_run's sleeps to be gone")


def test_agent_pre_run_counts_against_the_run_timeout(project, fake):
    mark = marker()
    project.write_jobs(
        "jobs:\n  report:\n    prompt: 'report {{ pre_run.stdout }}'\n    timeout: 3s\n    pre_run_timeout: 60s\n"
        f"    pre_run: 'sleep {mark} & sleep {mark}; echo collected'\n"
    )
    started = time.monotonic()
    res = project.run("run-job", "report", "--json", timeout=90)
    took = time.monotonic() - started
    out = json.loads(res.stdout)
    assert out["status"] == "timed_out" and out["reason"] == "timeout", out
    assert "during pre_run" in out["error"]
    assert took < 12, f"run-job took {took:.1f}s for a 3s timeout"
    assert not fake.requests  # the agent never started: nothing to give a grace answer about
    wait_for(lambda: not sleeping(mark), 5, what="the pre_run's sleeps to be gone")
