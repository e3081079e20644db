"""Edges of `runner run-job` (issue 14): signals on script-only jobs, the message while a job
finishes its step, `--json` with a `stdout` sink, and bad paths / numbers as one-line exit 2."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

from runner.testing import call, final
from tests.servehelp import in_a_tool_call, rows
from tests.ttyhelp import run_on_a_tty


def runs(project):
    """The ledger's rows, oldest first."""
    return rows(project.home, "SELECT * FROM runs ORDER BY created_at")


def one_line_exit_2(res) -> None:
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_first_sigterm_on_a_script_job_ends_it_interrupted_with_130(project):
    project.write_jobs("jobs:\n  s:\n    agent: false\n    pre_run: 'sleep 1.5; echo done > done.txt; echo out'\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", "run-job", "s"],
        env=project.env(),
        cwd=project.root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 20
    while not runs(project) and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "SIGTERM received: job s finishes its current step" in err
    assert (project.root / "done.txt").read_text() == "done\n"  # the step finished
    [row] = runs(project)
    assert (row["status"], row["reason"]) == ("interrupted", "interrupted")


def test_an_agent_job_says_it_waits_for_its_current_step(project, fake):
    fake.add(call("terminal", {"command": "sleep 3"}), final("never asked"))
    project.write_jobs("jobs:\n  a:\n    prompt: go\n    toolsets: [terminal]\n")
    proc = project.start_job("a", fake)
    in_a_tool_call(project.home)  # the signal comes during the command, well before the run could ask again
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert "SIGINT received: job a finishes its current step, then ends interrupted" in err


def test_json_output_stays_valid_with_a_stdout_sink(project):
    project.write_jobs("jobs:\n  j:\n    agent: false\n    pre_run: 'echo to-the-sink'\n    deliver: [stdout, file]\n")
    res = project.run("run-job", "j", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)  # the whole of stdout is one JSON document
    assert doc["status"] == "succeeded" and doc["output"] == "to-the-sink\n"
    assert "to-the-sink" in res.stderr  # the stdout sink writes to stderr under --json


def test_priority_out_of_sqlite_range_is_exit_2(project):
    project.write_jobs("jobs:\n  j:\n    agent: false\n    pre_run: 'true'\n")
    res = project.run("kanban", "add", "t", "--job", "j", "--priority", "99999999999999999999999")
    one_line_exit_2(res)
    assert "--priority" in res.stderr
    assert project.run("kanban", "add", "t", "--job", "j", "--priority", str(2**63 - 1)).returncode == 0


def test_record_to_an_unwritable_path_is_exit_2_before_any_row(project, fake):
    project.write_jobs("jobs:\n  a:\n    prompt: go\n")
    res = project.run("run-job", "a", "--record", "/proc/x/c.yaml")
    one_line_exit_2(res)
    assert "/proc/x/c.yaml" in res.stderr
    assert runs(project) == [] and fake.requests == []
    folder = project.root / "cassettes"
    folder.mkdir()
    assert project.run("run-job", "a", "--record", str(folder)).returncode == 2  # click's own path check
    assert runs(project) == []


def test_home_that_cannot_be_used_is_exit_2(project):
    project.write_jobs("jobs:\n  j:\n    agent: false\n    pre_run: 'true'\n")
    for args in (("jobs", "list"), ("run-job", "j"), ("runs", "list")):
        res = project.run("--home", "/proc/self", *args)
        one_line_exit_2(res)
        assert "/proc/self" in res.stderr


def test_progress_on_a_tty_one_line_per_turn_and_tool_call_quiet_in_pipes(project, fake):
    project.write_jobs("jobs:\n  p:\n    prompt: look\n    toolsets: [terminal]\n    deliver: [file]\n")
    fake.add(call("terminal", {"command": "echo hi"}), final("all good"))
    code, shown = run_on_a_tty(project, "run-job", "p")
    assert code == 0, shown
    lines = [ln.strip() for ln in shown.splitlines()]
    assert any(ln.startswith("model turn 1:") for ln in lines), shown
    assert any(ln.startswith("-> terminal") and "echo hi" in ln for ln in lines), shown
    assert any(ln.startswith("model turn 2:") for ln in lines), shown
    fake.add(call("terminal", {"command": "echo hi"}), final("all good"))
    piped = project.run("run-job", "p")
    assert piped.returncode == 0, piped.stderr
    assert "model turn" not in piped.stderr and "-> terminal" not in piped.stderr
