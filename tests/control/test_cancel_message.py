"""Who stopped a run is what `runs show` says (issue 32.8): a `runner runs cancel` of a running
`run-job` is recorded as "cancelled by USER@HOST" in the row, its events and `runs show`, never as
a signal; a SIGTERM to the run-job process still says signal."""

from __future__ import annotations

import json
import signal
from typing import Any

from runner.testing import call, final
from tests.conftest import Project
from tests.control.test_cut import cancel, communicate, configure, ended, run_job
from tests.servehelp import in_a_tool_call, marker, sleeping, wait_for


def show(project: Project, run_id: str) -> tuple[str, dict[str, Any]]:
    text = project.run("runs", "show", run_id)
    data = project.run("runs", "show", run_id, "--json")
    assert text.returncode == 0 and data.returncode == 0, text.stderr + data.stderr
    return text.stdout, json.loads(data.stdout)


def start_in_a_command(project: Project, fake: Any, seconds: int = 60) -> tuple[Any, dict[str, Any], str]:
    configure(project)
    mark = marker(seconds)
    fake.add(call("terminal", {"command": f"sleep {mark}"}), final("never"))
    project.write_jobs("jobs:\n  c:\n    prompt: go\n    toolsets: [terminal]\n")
    proc = run_job(project, "c")
    run = in_a_tool_call(project.home)
    wait_for(lambda: sleeping(mark), 30, what="the command's sleep")
    return proc, run, mark


def test_a_user_cancel_is_recorded_as_cancelled_by_who(project: Project, fake: Any) -> None:
    proc, run, _ = start_in_a_command(project, fake)
    cancel(project, run["id"])
    communicate(proc)
    row = ended(project, run["id"])
    assert (row["status"], row["reason"]) == ("interrupted", "cancelled")
    who = row["error"].removeprefix("cancelled by ").removesuffix(" (runner runs cancel)")
    assert "@" in who and row["error"] == f"cancelled by {who} (runner runs cancel)"
    text, data = show(project, run["id"])
    assert f"cancelled by {who}" in text and "signal" not in text, text
    limits = [e for e in data["events"] if e["kind"] == "limit"]
    assert limits and all("signal" not in json.dumps(e) for e in limits)


def test_a_sigterm_still_says_signal(project: Project, fake: Any) -> None:
    proc, run, _ = start_in_a_command(project, fake, seconds=3)  # a first SIGTERM lets the step finish
    proc.send_signal(signal.SIGTERM)
    communicate(proc)
    row = ended(project, run["id"])
    assert (row["status"], row["reason"]) == ("interrupted", "interrupted")
    assert "signal" in row["error"] and "cancelled" not in row["error"], row["error"]
    text, _ = show(project, run["id"])
    assert "signal" in text and "cancelled by" not in text, text
