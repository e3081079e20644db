"""Kanban workers forked from a warm forkserver (``runner.run.forks``), in serve and in
``runner kanban dispatch``: they find their task, hold the keys without an environment block
that shows them, and complete a task end to end with the fake model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.statuses import FINAL
from runner.testing import call, final
from tests.kanban_util import board_of, dispatcher, status_of, wait_for, write_config
from tests.servehelp import serve_factory

KEY = b"sk-test-key-0123456789abcdef"  # the project's OPENAI_API_KEY


@pytest.fixture
def serve(project):
    yield from serve_factory(project)


def cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def running_worker(project, task_id: int) -> int | None:
    with board_of(project) as board:
        task = board.get(task_id)
    return task.worker_pid if task.status == "running" and task.worker_pid else None


def final_run(project, task_id: int) -> bool:
    with board_of(project) as board:
        runs = board.runs(task_id)
    return len(runs) == 1 and runs[0]["status"] in FINAL


def check_forked(pid: int, dispatcher_pid: int) -> None:
    """``pid`` is a child of the warm forkserver, itself a child of the dispatching process, and
    neither shows the API key in the environment block /proc gives every process of the user."""
    server = parent(pid)
    assert "runner.run.forks" in cmdline(pid) and "kanban work" not in cmdline(pid)
    assert parent(server) == dispatcher_pid
    for p in (pid, server):
        assert KEY not in Path(f"/proc/{p}/environ").read_bytes()


def test_serve_picks_a_task_up_on_the_commit_not_the_poll(project, serve):
    """poll_seconds is a minute: only the change detection can start the worker this soon."""
    write_config(project, poll_seconds=60)
    project.write_jobs("jobs:\n  chore:\n    agent: false\n    pre_run: 'sleep 1; echo did $HERMES_KANBAN_TASK'\n")
    daemon = serve().started()
    added = project.run("kanban", "add", "Tidy up", "--job", "chore", "--json")
    assert added.returncode == 0, added.stderr
    task_id = json.loads(added.stdout)["id"]
    pid = wait_for(lambda: running_worker(project, task_id), timeout=20, what="a worker serve started")
    check_forked(pid, daemon.pid)
    wait_for(lambda: status_of(project, task_id) == "done", timeout=20, what="the task done")
    shown = json.loads(project.run("kanban", "show", str(task_id), "--json").stdout)
    assert shown["task"]["result"].strip() == f"did {task_id}"
    assert daemon.stop() == 0


def test_forked_worker_completes_an_agent_task_with_the_fake_model(project, fake):
    write_config(project)
    project.write_jobs("jobs:\n  agent:\n    prompt: Work on your kanban task.\n    toolsets: [kanban, terminal]\n")
    task_id = int(project.cli("kanban", "add", "count to two", "--job", "agent").output)
    fake.add(
        call("terminal", {"command": "sleep 1; echo counted"}),
        call("kanban_complete", {"result": "1, 2"}),
        final("Done."),
    )
    with dispatcher(project) as proc:
        pid = wait_for(lambda: running_worker(project, task_id), timeout=30, what="the worker running")
        check_forked(pid, proc.pid)
        wait_for(lambda: status_of(project, task_id) == "done", timeout=30, what="the task done")
        wait_for(lambda: final_run(project, task_id), timeout=20, what="the run row final")
    with board_of(project) as board:
        task = board.get(task_id)
        [run] = board.runs(task_id)
    assert task.result == "1, 2"
    ledger = json.loads(project.cli("runs", "show", run["id"], "--json").output)["run"]
    assert (ledger["trigger"], ledger["status"], ledger["task_id"]) == ("kanban", "succeeded", str(task_id))
    assert fake.keys_used() == [KEY.decode()] * 3  # the held key reached the forked worker
    log = (project.home / "logs" / "kanban" / f"{task_id}.log").read_text()
    assert "=== attempt 1" in log and f"task {task_id}: done (run {run['id']})" in log


def test_a_forked_worker_is_the_subreaper_of_what_its_commands_leave(project):
    """A command that leaves its session and clears its environment (no run mark to find it by)
    does not outlive the worker: the worker is its reaper."""
    write_config(project)
    pidfile = project.root / "bg.pid"
    project.write_jobs(f"jobs:\n  chore:\n    agent: false\n    pre_run: 'env -i setsid sleep 300 & echo $! > {pidfile}; echo ok'\n")
    task_id = int(project.cli("kanban", "add", "leave something", "--job", "chore").output)
    with dispatcher(project):
        wait_for(lambda: status_of(project, task_id) == "done", timeout=30, what="the task done")
        wait_for(lambda: final_run(project, task_id), timeout=20, what="the run row final")
    left = int(pidfile.read_text())
    wait_for(lambda: not alive(left), timeout=10, what="the setsid sleep to be gone")


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
