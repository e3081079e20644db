"""Durable runs (issue 33): a run killed with SIGKILL after turn 3 of 6 resumes from its journal
(``runner runs resume``): the model is not asked again for journaled turns, tools of journaled
results do not run again, the output is delivered once; a command cut by the crash is reported to
the model as of unknown outcome; refusals of ``runs resume``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from runner.testing import call, final, hang
from tests.servehelp import rows, wait_for

JOB = """
jobs:
  durable:
    prompt: go
    toolsets: [terminal]
    workdir: {workdir}
    deliver: ["webhook:{url}"]
"""


def _sizes(fake):
    return [len(r["body"]["messages"]) for r in fake.requests]


def _script_six(fake, marker):
    for n in (1, 2, 3):
        fake.add(call("terminal", {"command": f"echo turn-{n} >> {marker}; echo key=$RUNNER_STEP_KEY >> {marker}.keys"}))
    fake.add(hang(60))  # turn 4's first request: the worker is killed while it waits
    for n in (4, 5):
        fake.add(call("terminal", {"command": f"echo turn-{n} >> {marker}"}))
    fake.add(final("all six turns done"))


def test_run_job_killed_after_turn_3_resumes_from_its_journal(project, fake, receiver, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    marker = work / "marker.txt"
    _script_six(fake, marker)
    project.write_jobs(JOB.format(workdir=work, url=receiver.url))
    proc = project.start_job("durable", fake)
    wait_for(lambda: len(fake.requests) >= 4, 30, what="turn 4's request")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    [first] = rows(project.home, "SELECT * FROM runs")
    assert first["status"] == "running"  # killed hard: nothing recorded its end

    res = project.run("runs", "resume", first["id"])
    assert res.returncode == 0, res.stderr
    assert "attempt 2" in res.stderr
    assert marker.read_text().splitlines() == [f"turn-{n}" for n in range(1, 6)]  # each tool ran once
    # turns 1-3 asked once; turn 4's first request hung (never answered) and was asked again; 5, 6 once
    assert _sizes(fake) == [2, 4, 6, 8, 8, 10, 12]
    runs = rows(project.home, "SELECT * FROM runs ORDER BY attempt")
    assert [(r["attempt"], r["status"]) for r in runs] == [(1, "unknown"), (2, "succeeded")]
    assert runs[1]["parent_run"] == first["id"]
    [resumed] = rows(project.home, "SELECT payload FROM run_events WHERE kind='resumed'")
    payload = json.loads(resumed["payload"])
    assert (payload["from_run"], payload["turn"], payload["results"]) == (first["id"], 3, 3)
    [got] = receiver.wait(1)
    assert {k.lower(): v for k, v in got.headers.items()}["idempotency-key"] == f"{first['id']}:deliver:1"
    keys = (work / "marker.txt.keys").read_text().split()
    assert keys == [f"key={first['id']}:{n}.1" for n in (1, 2, 3)]
    show = project.run("runs", "show", runs[1]["id"])
    assert "resumed (attempt 2)" in show.stdout, show.stdout

    again = project.run("runs", "resume", runs[1]["id"])  # succeeded: refused
    assert again.returncode == 2 and "can be resumed" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1
    older = project.run("runs", "resume", first["id"])  # resumed already
    assert older.returncode == 2 and "resumed or retried already" in older.stderr


def test_a_command_cut_by_the_crash_is_reported_as_of_unknown_outcome(project, fake, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    fifo = work / "gate"
    os.mkfifo(fifo)
    fake.add(call("terminal", {"command": f"echo started >> {work}/log; cat {fifo}"}))
    fake.add(final("checked it"))
    project.write_jobs(JOB.format(workdir=work, url="http://127.0.0.1:9/none").replace("    deliver", "    #"))
    proc = project.start_job("durable", fake)
    wait_for(lambda: (work / "log").exists(), 30, what="the command to start")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    [first] = rows(project.home, "SELECT * FROM runs")
    res = project.run("runs", "resume", first["id"][-8:])
    assert res.returncode == 0, res.stderr
    assert (work / "log").read_text().splitlines() == ["started"]  # not run again
    assert len(fake.requests) == 2
    tool_result = fake.requests[1]["body"]["messages"][-1]
    assert tool_result["role"] == "tool"
    assert "outcome unknown" in tool_result["content"] and f"cat {fifo}" in tool_result["content"]
    assert "Check its effects" in tool_result["content"]


def test_runs_resume_refusals(project, fake):
    fake.add(final("done"))
    project.write_jobs("jobs:\n  quick:\n    prompt: go\n")
    assert project.run("run-job", "quick").returncode == 0
    [row] = rows(project.home, "SELECT * FROM runs")
    res = project.run("runs", "resume", row["id"])
    assert res.returncode == 2
    assert res.stderr.strip() == (
        f"error: run {row['id']} ended succeeded: only a run that ended failed/worker_died, "
        "failed/worker_lost, unknown or interrupted can be resumed"
    )
    inside = project.run("runs", "resume", row["id"], env=project.env(RUNNER_RUN_ID="20260101-000000-abcdef"))
    assert inside.returncode == 2 and "inside a run" in inside.stderr
    missing = project.run("runs", "resume", "nosuchrun")
    assert missing.returncode == 2


def test_bad_resume_value_is_one_line_exit_2(project):
    project.write_jobs("jobs:\n  j:\n    prompt: go\n    resume: later\n")
    res = project.run("run-job", "j")
    assert res.returncode == 2
    assert res.stderr.strip() == f"error: {project.jobs_path}: job j: resume: Input should be 'auto' or 'off'"


def test_a_run_lost_twice_resumes_again_and_alerts_its_loss_once(project, fake, receiver, tmp_path):
    """Attempt 1 is killed at turn 4; the next command finds it lost and alerts (``RUN:alert:failed:
    unknown/worker_lost``, RUN the first attempt). Its resume (attempt 2) is killed at turn 4 too,
    before it journaled a step of its own: its loss is the same alert under the same key, not sent
    again; attempt 3 still resumes the run's journal (from turn 4) and its success is alerted as a
    recovery, once."""
    work = tmp_path / "work"
    work.mkdir()
    marker = work / "marker.txt"
    for n in (1, 2, 3):
        fake.add(call("terminal", {"command": f"echo turn-{n} >> {marker}"}))
    fake.add(hang(60))  # attempt 1's turn 4
    fake.add(hang(60))  # attempt 2's turn 4
    for n in (4, 5):
        fake.add(call("terminal", {"command": f"echo turn-{n} >> {marker}"}))
    fake.add(final("all six turns done"))
    project.home.mkdir(parents=True, exist_ok=True)
    (project.home / "config.yaml").write_text(f"alerts: ['webhook:{receiver.url}/alerts']\n")
    project.write_jobs(JOB.format(workdir=work, url=f"{receiver.url}/out"))
    proc = project.start_job("durable", fake)
    wait_for(lambda: len(fake.requests) >= 4, 30, what="attempt 1's turn 4")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    [first] = rows(project.home, "SELECT * FROM runs")
    second = subprocess.Popen(
        [sys.executable, "-m", "runner", "runs", "resume", first["id"]],
        env=project.env(),
        cwd=project.root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(lambda: len(fake.requests) >= 5, 30, what="attempt 2's turn 4")
    os.kill(second.pid, signal.SIGKILL)
    second.wait(timeout=10)
    [_, attempt2] = rows(project.home, "SELECT * FROM runs ORDER BY attempt")
    res = project.run("runs", "resume", attempt2["id"])
    assert res.returncode == 0, res.stderr
    assert marker.read_text().splitlines() == [f"turn-{n}" for n in range(1, 6)]
    assert _sizes(fake) == [2, 4, 6, 8, 8, 8, 10, 12]  # attempt 3 asked turn 4 again, not turn 1
    runs = rows(project.home, "SELECT * FROM runs ORDER BY attempt")
    assert [(r["attempt"], r["status"], r["reason"]) for r in runs] == [
        (1, "unknown", "worker_lost"),
        (2, "unknown", "worker_lost"),
        (3, "succeeded", None),
    ]
    wait_for(lambda: len(receiver.requests) >= 3, 10, what="the alerts and the delivery")
    time.sleep(0.3)
    alerts = [r for r in receiver.requests if r.path.startswith("/alerts")]
    assert [(a.json()["event"], a.json()["run_id"]) for a in alerts] == [
        ("failed", first["id"]),
        ("recovered", runs[2]["id"]),
    ]
    assert [a.headers["idempotency-key"] for a in alerts] == [
        f"{first['id']}:alert:failed:unknown/worker_lost",
        f"{first['id']}:alert:recovered",
    ]
    [repeat] = rows(project.home, "SELECT payload FROM run_events WHERE kind='alert' AND run_id=?", (attempt2["id"],))
    assert json.loads(repeat["payload"])["repeat"] is True
    assert len([r for r in receiver.requests if r.path.startswith("/out")]) == 1
    keys = {r["key"] for r in rows(project.home, "SELECT key FROM step_keys")}
    assert {f"{first['id']}:alert:failed:unknown/worker_lost:1", f"{first['id']}:alert:recovered:1"} <= keys


def test_a_message_given_to_the_model_before_the_crash_is_in_the_resumed_history(project, fake, tmp_path):
    """``runner runs say`` during turn 1's command: the model gets the message before turn 2's
    request. The worker is killed while turn 3 waits for the model; the resumed attempt puts the
    message back at the same place (turn 3's request is the same, message for message) and the
    message counts as delivered."""
    work = tmp_path / "work"
    work.mkdir()
    gate = work / "gate"
    fake.add(call("terminal", {"command": f"while [ ! -e {gate} ]; do sleep 0.05; done; echo passed"}))
    fake.add(call("terminal", {"command": "echo two"}))
    fake.add(hang(60))  # turn 3's first request: the worker is killed while it waits
    fake.add(final("done, the last hour only"))
    project.write_jobs(JOB.format(workdir=work, url="http://127.0.0.1:9/none").replace("    deliver", "    #"))
    proc = project.start_job("durable", fake)
    [first] = wait_for(lambda: rows(project.home, "SELECT * FROM runs WHERE status='running'"), 30, what="the run")
    said = project.run("runs", "say", first["id"], "Only the last hour matters.")
    assert said.returncode == 0, said.stderr
    time.sleep(1.0)  # the run's watch sees it (a look every 0.1 s)
    gate.touch()
    wait_for(lambda: len(fake.requests) >= 3, 30, what="turn 3's request")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    res = project.run("runs", "resume", first["id"])
    assert res.returncode == 0, res.stderr
    asked = [r["body"]["messages"] for r in fake.requests]
    assert [len(m) for m in asked] == [2, 5, 7, 7]  # turn 2's request: the tool result, then the message
    assert asked[1][-1]["role"] == "user" and "Only the last hour matters." in asked[1][-1]["content"]
    assert asked[3] == asked[2]  # the resumed turn 3: the same history, the message at the same place
    [steer] = rows(project.home, "SELECT outcome FROM control_requests WHERE kind = 'steer'")
    assert steer["outcome"] == "delivered"
