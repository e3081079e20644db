"""Live control through the store with real processes: `runner jobs trigger` into a running (or
stopped) `runner serve`, `runner runs cancel` of a serve run, a run-job run and a queued run,
`runner kanban retry`, and a parked approval answered while serve runs the job."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from typing import Any

import pytest

from runner.host.procs import RUN_MARK, marked
from runner.testing import call, final
from tests.conftest import Project
from tests.servehelp import in_a_tool_call, job_rows, rows, serve_factory, ts, wait_for, write_config

FINAL = ("succeeded", "failed", "timed_out", "interrupted", "skipped", "missed", "unknown")


@pytest.fixture
def serve(project):
    yield from serve_factory(project)


def ended(project: Project, job: str, n: int = 1, timeout: float = 30) -> list[dict[str, Any]]:
    def done() -> list[dict[str, Any]] | None:
        found = [r for r in job_rows(project.home, job) if r["status"] in FINAL]
        return found if len(found) >= n else None

    return wait_for(done, timeout, what=f"{n} run(s) of {job} to end")


def one_line_exit_2(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    return res.stderr


def test_trigger_while_serve_runs_starts_within_a_second(project: Project, fake: Any, serve: Any) -> None:
    write_config(project)
    fake.add(final("done"))
    project.write_jobs("jobs:\n  t:\n    prompt: go\n")  # no schedule: manual only
    daemon = serve().started()
    res = project.run("jobs", "trigger", "t")
    assert res.returncode == 0 and "runs it now" in res.stdout, res.stderr
    [run] = ended(project, "t")
    assert (run["status"], run["trigger"]) == ("succeeded", "manual")
    [request] = rows(project.home, "SELECT * FROM control_requests")
    assert request["outcome"] == run["id"] and "@" in request["requested_by"]
    assert (ts(run["created_at"]) - ts(request["requested_at"])).total_seconds() < 1.0
    assert "triggered t by" in daemon.log()
    assert daemon.stop() == 0


def test_trigger_while_serve_is_down_fires_when_it_starts(project: Project, serve: Any) -> None:
    write_config(project)
    project.write_jobs("jobs:\n  t:\n    agent: false\n    pre_run: echo hello\n")
    res = project.run("jobs", "trigger", "t")
    assert res.returncode == 0 and "runs when serve starts" in res.stdout
    assert job_rows(project.home, "t") == []
    daemon = serve().started()
    [run] = ended(project, "t")
    assert (run["status"], run["trigger"]) == ("succeeded", "manual")
    assert daemon.stop() == 0


def test_trigger_of_an_unknown_job_exits_2(project: Project) -> None:
    project.write_jobs("jobs:\n  t:\n    prompt: go\n")
    assert "nope" in one_line_exit_2(project.run("jobs", "trigger", "nope"))
    assert rows(project.home, "SELECT * FROM control_requests") == []


def test_trigger_with_vars_renders_them_into_the_prompt(project: Project, fake: Any, serve: Any) -> None:
    write_config(project)
    fake.add(final("done"), final("done again"))
    project.write_jobs(
        "jobs:\n  t:\n    prompt: 'look at {{ vars.repo }} on {{ vars.branch }}'\n"
        "    vars: {repo: default-repo, branch: main}\n"
    )
    daemon = serve().started()
    res = project.run("jobs", "trigger", "t", "--var", "repo=acme/widgets", "--var", "branch=a=b c")
    assert res.returncode == 0 and "runs it now" in res.stdout, res.stderr
    [run] = ended(project, "t")
    assert run["status"] == "succeeded", run
    user = [m["content"] for m in fake.requests[0]["body"]["messages"] if m["role"] == "user"]
    assert "look at acme/widgets on a=b c" in "\n".join(str(u) for u in user)
    [request] = rows(project.home, "SELECT * FROM control_requests")
    assert json.loads(request["vars"]) == {"repo": "acme/widgets", "branch": "a=b c"}
    assert project.run("jobs", "trigger", "t").returncode == 0  # no --var: the job's own vars
    ended(project, "t", 2)
    user = [m["content"] for m in fake.requests[1]["body"]["messages"] if m["role"] == "user"]
    assert "look at default-repo on main" in "\n".join(str(u) for u in user)
    assert daemon.stop() == 0


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--var", "novalue"], "expected KEY=VALUE"),
        (["--var", "=x"], "expected KEY=VALUE"),
        (["--var", "bad-name=x"], "not a template variable name"),
        (["--var", "1st=x"], "not a template variable name"),
        (["--var", "big=" + "x" * 4001], "the limit is 4,000"),
        ([a for i in range(21) for a in ("--var", f"k{i}=v")], "the limit is 20"),
    ],
)
def test_trigger_with_a_bad_var_exits_2_writing_nothing(project: Project, args: list[str], said: str) -> None:
    project.write_jobs("jobs:\n  t:\n    prompt: go\n")
    assert said in one_line_exit_2(project.run("jobs", "trigger", "t", *args))
    assert rows(project.home, "SELECT * FROM control_requests") == []


def test_triggers_go_through_the_overlap_policy(project: Project, serve: Any) -> None:
    write_config(project)
    gate = project.root / "release"  # the first run lasts until the second trigger was answered
    pre_run = f"while [ ! -e {gate} ]; do sleep 0.05; done"
    project.write_jobs(f"jobs:\n  t:\n    agent: false\n    pre_run: '{pre_run}'\n    overlap: skip\n")
    daemon = serve().started()
    assert project.run("jobs", "trigger", "t").returncode == 0
    wait_for(lambda: [r for r in job_rows(project.home, "t") if r["status"] == "running"], 10, what="the first run")
    assert project.run("jobs", "trigger", "t").returncode == 0
    wait_for(lambda: len(job_rows(project.home, "t")) >= 2, 30, what="the second trigger's row")
    gate.touch()
    runs = ended(project, "t", 2)
    assert sorted((r["status"], r["reason"]) for r in runs) == [("skipped", "overlap"), ("succeeded", None)]
    assert daemon.stop() == 0


def slow_steps(project: Project, fake: Any) -> None:
    """A run whose first tool call takes a while, then would touch a file, then answer. The while
    is long enough for ``runner runs cancel`` (a process of its own) to start and write its
    request, and for the run to see it, on a loaded machine: the cancel cuts it."""
    fake.add(
        call("terminal", {"command": "sleep 20; echo first"}),
        call("terminal", {"command": "touch second"}),
        final("never"),
    )
    project.write_jobs("jobs:\n  c:\n    prompt: go\n")


def in_first_step(project: Project) -> dict[str, Any]:
    return in_a_tool_call(project.home)


def assert_cancelled_in_the_step(project: Project, fake: Any, run_id: str) -> None:
    [run] = [r for r in rows(project.home) if r["id"] == run_id]
    assert (run["status"], run["reason"]) == ("interrupted", "cancelled"), run
    assert "@" in run["error"]
    assert not (project.root / "second").exists() and len(fake.requests) == 1
    results = rows(project.home, "SELECT payload FROM run_events WHERE run_id=? AND kind='tool_result'", (run_id,))
    result = json.loads(results[0]["payload"])
    assert result["cut"] is True and "first" not in result["result"]  # the current step was cut
    assert marked(RUN_MARK, f"{run_id}-", prefix=True) == []  # nothing the run started is left


def test_cancel_of_a_serve_run(project: Project, fake: Any, serve: Any) -> None:
    write_config(project)
    slow_steps(project, fake)
    daemon = serve().started()
    assert project.run("jobs", "trigger", "c").returncode == 0
    run = in_first_step(project)
    res = project.run("runs", "cancel", run["id"])
    assert res.returncode == 0 and "cancel requested" in res.stdout, res.stderr
    ended(project, "c")
    assert_cancelled_in_the_step(project, fake, run["id"])
    again = project.run("runs", "cancel", run["id"])
    assert "not running" in one_line_exit_2(again)
    assert daemon.stop() == 0


def test_cancel_of_a_run_job_run(project: Project, fake: Any) -> None:
    slow_steps(project, fake)
    proc = project.start_job("c", fake)
    run = in_first_step(project)
    assert project.run("runs", "cancel", run["id"]).returncode == 0
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, out + err
    assert_cancelled_in_the_step(project, fake, run["id"])


def test_cancel_of_an_unknown_run_exits_2(project: Project) -> None:
    project.write_jobs("jobs:\n  c:\n    prompt: go\n")
    assert "no run" in one_line_exit_2(project.run("runs", "cancel", "20990101-000000-abcdef"))


def test_cancel_of_a_run_waiting_in_the_pool(project: Project, serve: Any) -> None:
    write_config(project, max_parallel=1)
    gate = project.root / "release"  # `long` holds the only slot until the cancel was answered
    project.write_jobs(
        f"jobs:\n  long:\n    agent: false\n    pre_run: 'while [ ! -e {gate} ]; do sleep 0.05; done'\n"
        "  waits:\n    agent: false\n    pre_run: echo hi\n"
    )
    daemon = serve().started()
    assert project.run("jobs", "trigger", "long").returncode == 0
    wait_for(lambda: [r for r in job_rows(project.home, "long") if r["status"] == "running"], 10, what="long")
    assert project.run("jobs", "trigger", "waits").returncode == 0
    [queued] = wait_for(lambda: [r for r in job_rows(project.home, "waits") if r["status"] == "queued"], 10)
    assert project.run("runs", "cancel", queued["id"]).returncode == 0
    [run] = ended(project, "waits", timeout=10)
    assert (run["status"], run["reason"], run["started_at"]) == ("interrupted", "cancelled", None)
    assert "before it started" in run["error"]
    gate.touch()
    ended(project, "long")
    assert daemon.stop() == 0


def test_kanban_retry(project: Project) -> None:
    project.write_jobs("jobs:\n  k:\n    prompt: go\n")
    assert project.run("kanban", "add", "a task", "--job", "k").returncode == 0
    with project.db() as conn:
        conn.execute("UPDATE tasks SET status='failed', attempts=3, max_attempts=3 WHERE id=1")
    res = project.run("kanban", "retry", "1")
    assert res.returncode == 0 and "task 1: ready (attempt 4 of 4)" in res.stdout, res.stderr
    [task] = rows(project.home, "SELECT status, attempts, max_attempts FROM tasks")
    assert task == {"status": "ready", "attempts": 3, "max_attempts": 4}
    assert "retried" in [e["kind"] for e in rows(project.home, "SELECT kind FROM task_events")]
    assert "only a failed or blocked task" in one_line_exit_2(project.run("kanban", "retry", "1"))
    assert "no task 9" in one_line_exit_2(project.run("kanban", "retry", "9"))


def test_a_serve_run_parks_and_continues_when_granted(project: Project, fake: Any, serve: Any) -> None:
    write_config(project)
    (project.root / "build").mkdir()
    fake.add(call("terminal", {"command": "rm -rf build"}), final("cleaned"))
    project.write_jobs("jobs:\n  p:\n    prompt: go\n    approvals: manual\n")
    daemon = serve().started()
    assert project.run("jobs", "trigger", "p").returncode == 0
    [request] = wait_for(
        lambda: rows(project.home, "SELECT * FROM approval_requests WHERE status='pending'"), 30, what="the park"
    )
    assert job_rows(project.home, "p")[0]["status"] == "waiting"
    line = f"is waiting for approval {request['id']}"
    daemon.wait_log(line)  # serve's one line, with the command and how to answer
    [logged] = [x for x in daemon.log().splitlines() if line in x]
    assert "rm -rf build" in logged and f"runner approvals grant {request['id']}" in logged
    assert project.run("approvals", "grant", request["id"]).returncode == 0
    [run] = ended(project, "p")
    assert run["status"] == "succeeded" and not (project.root / "build").exists()
    assert daemon.log().count(line) == 1
    assert daemon.stop() == 0


def test_a_serve_worker_killed_while_its_run_waits(project: Project, fake: Any, serve: Any) -> None:
    """SIGKILL of the worker process (by the pid its row names) while the run waits: serve records
    the run's end (failed, worker_died), the approval is abandoned, nothing stays waiting."""
    write_config(project)
    fake.add(call("terminal", {"command": "rm -rf build"}), final("never"))
    project.write_jobs("jobs:\n  p:\n    prompt: go\n    approvals: manual\n")
    daemon = serve().started()
    assert project.run("jobs", "trigger", "p").returncode == 0
    [request] = wait_for(
        lambda: rows(project.home, "SELECT * FROM approval_requests WHERE status='pending'"), 30, what="the park"
    )
    [run] = wait_for(lambda: [r for r in job_rows(project.home, "p") if r["status"] == "waiting"], 10, what="waiting")
    os.kill(run["pid"], signal.SIGKILL)
    [run] = ended(project, "p")
    assert (run["status"], run["reason"]) == ("failed", "worker_died") and "SIGKILL" in run["error"]
    [req] = rows(project.home, "SELECT * FROM approval_requests")
    assert req["status"] == "abandoned"
    assert rows(project.home, "SELECT id FROM runs WHERE status='waiting'") == []
    res = project.run("approvals", "grant", request["id"])
    assert res.returncode == 2 and "already abandoned" in res.stderr
    assert daemon.stop() == 0


def test_a_kanban_worker_parks_and_continues_when_granted(project: Project, fake: Any) -> None:
    """The worker holds its claim (the lease keeps being renewed) while it waits for a person."""
    from runner.clock import utcnow
    from tests.kanban_util import board_of, dispatcher, status_of
    from tests.kanban_util import write_config as kanban_config

    kanban_config(project)
    (project.root / "build").mkdir()
    project.write_jobs(
        "jobs:\n  agent:\n    prompt: Work on your kanban task.\n    toolsets: [terminal, kanban]\n"
        "    workdir: .\n    approvals: manual\n"
    )
    with board_of(project) as board:
        task = board.add("clean the build", now=utcnow(), job="agent")
    fake.add(
        call("terminal", {"command": "rm -rf build"}),
        call("kanban_complete", {"result": "cleaned"}),
        final("done"),
    )
    with dispatcher(project):
        [request] = wait_for(
            lambda: rows(project.home, "SELECT * FROM approval_requests WHERE status='pending'"), 30, what="the park"
        )
        time.sleep(2.5)  # longer than the 2 s lease: the parked worker keeps renewing its claim
        assert status_of(project, task) == "running"
        assert project.run("approvals", "grant", request["id"]).returncode == 0
        wait_for(lambda: status_of(project, task) == "done", 30, what="the task done")
    assert not (project.root / "build").exists()
