"""`runner runs cancel` stops the current step (issue 32): with real processes, a run cancelled
during a 60 s pre_run, a 60 s terminal command, a model request that does not answer, or an MCP
call that hangs ends within ``serve.kill_grace`` + 1 s, ``interrupted`` (reason ``cancelled``, the
message naming who asked), the step marked cut in its events and no process of it left; under
`run-job`, serve and a kanban worker (Celery workers: tests/dist/test_celery.py). A command that
ignores SIGTERM gets SIGKILL after the grace."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import pytest

from runner.testing import call, final, hang
from tests.conftest import Project
from tests.kanban_util import dispatcher
from tests.mcp.conftest import SERVER
from tests.servehelp import in_a_tool_call, job_rows, marker, rows, serve_factory, sleeping, ts, wait_for

GRACE = 2.0  # serve.kill_grace of these tests (the MCP one: the default 5 s, see there)
DEFAULT_GRACE = 5.0
FINAL = ("succeeded", "failed", "timed_out", "interrupted", "skipped", "missed", "unknown")


@pytest.fixture
def serve(project: Project) -> Any:
    yield from serve_factory(project)


def configure(project: Project, extra: str = "", *, grace: float = GRACE) -> None:
    project.home.mkdir(parents=True, exist_ok=True)
    (project.home / "config.yaml").write_text(f"serve: {{heartbeat_s: 0.5, kill_grace: {grace:g}, shutdown_grace: 3}}\n{extra}")


def run_job(project: Project, job: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "runner", "run-job", job, "--json"],
        env=project.env(),
        cwd=project.root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def communicate(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[str, str]:
    """The run-job's output once it exited; killed (and the test failed) when it outlives ``timeout``."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise


def running(project: Project, job: str) -> dict[str, Any]:
    found = wait_for(
        lambda: [r for r in job_rows(project.home, job) if r["status"] == "running"], 30, what=f"{job} running"
    )
    return dict(found[0])


def cancel(project: Project, run_id: str) -> float:
    """``runner runs cancel RUN`` as a process of its own; the time its request was written."""
    res = project.run("runs", "cancel", run_id)
    assert res.returncode == 0 and "cancel requested" in res.stdout, res.stderr
    return time.monotonic()


def ended(project: Project, run_id: str, timeout: float = 30) -> dict[str, Any]:
    [row] = wait_for(
        lambda: [r for r in rows(project.home) if r["id"] == run_id and r["status"] in FINAL], timeout, 0.02
    )
    return dict(row)


def payloads(project: Project, run_id: str, kind: str) -> list[dict[str, Any]]:
    found = rows(project.home, "SELECT payload FROM run_events WHERE run_id=? AND kind=? ORDER BY seq", (run_id, kind))
    return [json.loads(r["payload"]) for r in found]


def assert_cancelled(row: dict[str, Any]) -> None:
    assert (row["status"], row["reason"]) == ("interrupted", "cancelled"), row
    assert row["error"].startswith("cancelled by ") and "@" in row["error"], row["error"]
    assert "signal" not in row["error"]


def test_run_job_pre_run_that_ignores_sigterm_is_killed_after_kill_grace(project: Project) -> None:
    configure(project)
    mark = marker(60)
    project.write_jobs(f"jobs:\n  slow:\n    agent: false\n    pre_run: \"trap '' TERM; sleep {mark}; echo never\"\n")
    proc = run_job(project, "slow")
    run = running(project, "slow")
    wait_for(lambda: sleeping(mark), 30, what="the pre_run's sleep")
    before = time.monotonic()  # the request is written after this: SIGTERM, then SIGKILL GRACE later
    asked = cancel(project, run["id"])
    out, err = communicate(proc)
    ended_at = time.monotonic()
    assert proc.returncode == 130, out + err
    # not killed before the grace (measured from before the request: no load can shorten it), and
    # killed once it is over, long before the 60 s sleep's end (the rest is run-job's poll, kill,
    # end written and exit: up to a few seconds on a loaded machine)
    assert ended_at - before >= GRACE, f"run-job ended {ended_at - before:.1f}s after the cancel began (grace {GRACE}s)"
    took = ended_at - asked
    assert took < GRACE + 3, f"run-job ended {took:.1f}s after the cancel (SIGTERM ignored: SIGKILL after {GRACE}s)"
    assert_cancelled(ended(project, run["id"]))
    assert json.loads(out)["reason"] == "cancelled"
    [pre] = payloads(project, run["id"], "pre_run")
    assert pre["cut"] is True and "never" not in pre["stdout"]
    assert not sleeping(mark)


def test_serve_run_terminal_command_is_cut(project: Project, fake: Any, serve: Any) -> None:
    configure(project)
    mark = marker(60)
    fake.add(call("terminal", {"command": f"sleep {mark}; touch {project.root}/after"}), final("never"))
    project.write_jobs("jobs:\n  c:\n    prompt: go\n    toolsets: [terminal]\n")
    daemon = serve().started()
    assert project.run("jobs", "trigger", "c").returncode == 0
    run = in_a_tool_call(project.home)
    wait_for(lambda: sleeping(mark), 30, what="the command's sleep")
    asked = cancel(project, run["id"])
    row = ended(project, run["id"])
    took = time.monotonic() - asked
    assert took < GRACE + 1, f"the run ended {took:.1f}s after the cancel"
    assert_cancelled(row)
    [result] = payloads(project, run["id"], "tool_result")
    assert result["cut"] is True
    assert len(fake.requests) == 1 and not (project.root / "after").exists()
    assert not sleeping(mark)
    assert daemon.stop() == 0


def test_run_job_model_request_that_does_not_answer_is_given_up(project: Project, fake: Any) -> None:
    configure(project)
    fake.add(hang(60))
    project.write_jobs("jobs:\n  m:\n    prompt: go\n")
    proc = run_job(project, "m")
    run = running(project, "m")
    wait_for(lambda: fake.requests, 30, what="the model request")
    asked = cancel(project, run["id"])
    out, err = communicate(proc)
    took = time.monotonic() - asked
    assert proc.returncode == 130, out + err
    assert took < GRACE + 1, f"run-job ended {took:.1f}s after the cancel"
    assert_cancelled(ended(project, run["id"]))
    assert payloads(project, run["id"], "request_cut")


def test_kanban_worker_run_is_cut(project: Project, fake: Any) -> None:
    configure(project, "kanban: {max_workers: 1, lease_seconds: 5, poll_seconds: 0.1, retry_backoff: 0}\n")
    mark = marker(60)
    fake.add(call("terminal", {"command": f"sleep {mark}"}), final("never"))
    project.write_jobs("jobs:\n  k:\n    prompt: go\n    toolsets: [terminal]\n")
    assert project.run("kanban", "add", "a task", "--job", "k").returncode == 0
    with dispatcher(project):
        run = in_a_tool_call(project.home)
        wait_for(lambda: sleeping(mark), 30, what="the command's sleep")
        asked = cancel(project, run["id"])
        row = ended(project, run["id"])
        took = time.monotonic() - asked
    assert took < GRACE + 1, f"the run ended {took:.1f}s after the cancel"
    assert_cancelled(row)
    assert not sleeping(mark)


def test_run_job_mcp_call_that_hangs_is_cancelled(project: Project, fake: Any) -> None:
    """The call is cancelled at once; the stdio server, stuck in it, then gets the MCP SDK's
    shutdown (stdin closed, SIGTERM to its group 2 s later): within the default kill_grace + 1 s."""
    servers = f"mcp_servers:\n  test:\n    command: {sys.executable}\n    args: [{SERVER}]\n"
    configure(project, servers, grace=DEFAULT_GRACE)
    fake.add(call("mcp__test__hang", {"seconds": 60}), final("never"))
    project.write_jobs("jobs:\n  m:\n    prompt: go\n    toolsets: [mcp:test]\n")
    proc = run_job(project, "m")
    run = in_a_tool_call(project.home)
    asked = cancel(project, run["id"])
    out, err = communicate(proc)
    took = time.monotonic() - asked
    assert proc.returncode == 130, out + err
    assert took < DEFAULT_GRACE + 1, f"run-job ended {took:.1f}s after the cancel"
    assert_cancelled(ended(project, run["id"]))
    [result] = payloads(project, run["id"], "tool_result")
    assert result["cut"] is True and "too late" not in result["result"]
    assert len(fake.requests) == 1
    [request] = rows(project.home, "SELECT requested_at FROM control_requests")
    [answered] = rows(project.home, "SELECT ts FROM run_events WHERE run_id=? AND kind='tool_result'", (run["id"],))
    assert (ts(answered["ts"]) - ts(request["requested_at"])).total_seconds() < 1  # the call itself: at once
