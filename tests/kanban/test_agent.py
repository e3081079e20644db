"""Agent workers and the kanban tools, against the fake model server: ending a task with
kanban_complete, the one reminder, tool visibility with and without HERMES_KANBAN_TASK."""

import json

import pytest

from runner.clock import utcnow
from runner.kanban.work import REMINDER, UNFINISHED, TaskSession
from runner.statuses import FINAL
from runner.store import Store
from runner.store.board import Board
from runner.testing import call, final
from runner.tools import discover
from runner.tools.context import ToolContext
from tests.kanban_util import board_of, dispatcher, status_of, wait_for, write_config

JOBS = """\
jobs:
  agent:
    prompt: Work on your kanban task.
    toolsets: [kanban, terminal]
  orch:
    prompt: Triage the backlog.
    toolsets: [terminal, kanban]
  echo:
    agent: false
    pre_run: echo hi
"""
TASK_TOOLS = ["terminal", "kanban_block", "kanban_comment", "kanban_complete", "kanban_create", "kanban_show"]


def tool_names(request):
    return [t["function"]["name"] for t in request["body"].get("tools", [])]


def tool_results(request):
    return [m["content"] for m in request["body"]["messages"] if m["role"] == "tool"]


def test_agent_worker_completes_task_and_show_has_the_result(project, fake):
    write_config(project)
    project.write_jobs(JOBS)
    with board_of(project) as board:
        parent = board.add("collect numbers", now=utcnow(), job="echo")
        [c] = board.claim("t", now=utcnow(), lease_seconds=60)
        board.complete(parent, c.fence, "the numbers are 40 and 2", now=utcnow())
        t = board.add("add them up", now=utcnow(), body="Sum the numbers.", parents=[parent], job="agent")
        board.comment(t, "use integer arithmetic", now=utcnow(), author="ana")
    fake.add(
        call("kanban_show"),
        call("terminal", {"command": "pwd"}),
        call("kanban_comment", {"text": "adding now; key sk-test-key-0123456789abcdef"}),
        call("kanban_complete", {"result": "the answer is 42 (not sk-test-key-0123456789abcdef)"}),
        final("Completed the sum."),
    )
    with dispatcher(project):
        wait_for(lambda: status_of(project, t) == "done", timeout=30, what="agent task done")
        wait_for(lambda: runs_final(project, t, 1), timeout=20, what="the run row final")
    first = fake.requests[0]
    assert tool_names(first) == TASK_TOOLS
    prompt = first["body"]["messages"][1]["content"]
    assert prompt.startswith("Work on your kanban task.")
    for piece in (f"Kanban task {t}: add them up", "Sum the numbers.", "ana", "use integer arithmetic"):
        assert piece in prompt
    assert f'task {parent} "collect numbers": the numbers are 40 and 2' in prompt
    shown = json.loads(tool_results(fake.requests[1])[0])
    assert shown["task"]["title"] == "add them up" and shown["parents"][0]["result"] == "the numbers are 40 and 2"
    assert str(project.home / "workspaces" / str(t)) in tool_results(fake.requests[2])[1]
    text = project.cli("kanban", "show", str(t)).output
    assert "the answer is 42" in text and "adding now" in text and "succeeded" in text
    with board_of(project) as board:
        [run] = board.runs(t)
    ledger = json.loads(project.cli("runs", "show", run["id"], "--json").output)["run"]
    assert (ledger["trigger"], ledger["task_id"], ledger["status"]) == ("kanban", str(t), "succeeded")
    key = b"sk-test-key-0123456789abcdef"
    written = [p for p in project.home.rglob("*") if p.is_file() and key in p.read_bytes()]
    assert written == [], f"the API key was written to {written}"


def runs_final(project, task_id, count=2):
    """The task's ``count`` run rows all have a final status (the task is done once kanban_complete
    returns; the worker writes its run row's final status after)."""
    with board_of(project) as board:
        runs = board.runs(task_id)
    return len(runs) == count and all(r["status"] in FINAL for r in runs)


def test_stopping_without_ending_is_reminded_once_then_the_attempt_fails(project, fake):
    write_config(project)
    project.write_jobs(JOBS)
    t = int(project.cli("kanban", "add", "think hard", "--job", "agent", "--max-attempts", "2").output)
    fake.add(
        final("I thought about it."),  # attempt 1
        final("Still thinking."),  # after the reminder: the attempt fails
        final("Done, I think."),  # attempt 2
        call("kanban_complete", {"result": "thought it through"}),  # after the reminder
        final("Completed."),
    )
    with dispatcher(project):
        wait_for(lambda: status_of(project, t) == "done", timeout=40, what="second attempt done")
        wait_for(lambda: runs_final(project, t), timeout=20, what="both run rows final")
    assert fake.requests[1]["body"]["messages"][-1] == {"role": "user", "content": REMINDER}
    assert len(fake.requests) == 5
    with board_of(project) as board:
        task = board.get(t)
        runs = board.runs(t)
    assert (task.attempts, task.result) == (2, "thought it through")
    assert [r["status"] for r in runs] == ["failed", "succeeded"]
    assert runs[0]["reason"] == "unfinished"
    events = json.loads(project.cli("kanban", "show", str(t), "--json").output)["events"]
    assert [e["payload"]["error"] for e in events if e["kind"] == "attempt_failed"] == [UNFINISHED]


def test_orchestrator_without_task_env_gets_create_and_list_only(project, fake):
    project.write_jobs(JOBS)
    fake.add(
        call("kanban_create", {"title": "follow-up A", "body": "check A", "job": "echo", "priority": 2}),
        call("kanban_create", {"title": "follow-up B", "job": "echo", "parents": [1]}),
        call("kanban_create", {"title": "no job"}),
        call("kanban_list", {"status": "ready"}),
        call("kanban_complete", {"result": "not mine to complete"}),
        final("Filed two follow-ups."),
    )
    res = project.run("run-job", "orch")
    assert res.returncode == 0, res.stderr
    assert tool_names(fake.requests[0]) == ["terminal", "kanban_create", "kanban_list"]
    results = tool_results(fake.requests[-1])
    assert results[:2] == ["created task 1", "created task 2"]
    assert "no job for the new task" in results[2]
    assert json.loads(results[3]) == {
        "tasks": [{"id": 1, "title": "follow-up A", "status": "ready", "priority": 2, "job": "echo"}],
        "total": 1,
    }
    assert results[4].startswith("error: unknown tool 'kanban_complete'")
    with board_of(project) as board:
        a, b = board.get(1), board.get(2)
    assert a.created_by.startswith("run:") and (b.status, [p.id for p in board_of_parents(project, 2)]) == ("todo", [1])


def board_of_parents(project, task_id):
    with board_of(project) as board:
        return board.parents(task_id)


def test_worker_tools_cannot_touch_another_task(project, fake):
    write_config(project, max_workers=1)
    project.write_jobs(JOBS)
    other = int(project.cli("kanban", "add", "someone else's", "--job", "echo").output)
    project.cli("kanban", "block", str(other), "parked")
    mine = int(project.cli("kanban", "add", "mine", "--job", "agent").output)
    fake.add(
        call("kanban_complete", {"result": "hijack", "task_id": other}),
        call("kanban_comment", {"text": "hijack", "task_id": other}),
        call("kanban_list"),
        call("kanban_create", {"title": "sub-task", "parents": [other]}),
        call("kanban_create", {"title": "sub-task", "job": "echo"}),
        call("kanban_complete", {"result": "my own result"}),
        call("kanban_complete", {"result": "twice"}),
        final("ok"),
    )
    with dispatcher(project):
        wait_for(lambda: status_of(project, mine) == "done", timeout=30, what="own task done")
        wait_for(lambda: len(fake.requests) == 8, timeout=10, what="the final turn")
    results = tool_results(fake.requests[-1])
    assert results[0].startswith("error: unknown argument(s) 'task_id'")
    assert results[1].startswith("error: unknown argument(s) 'task_id'")
    assert results[2].startswith("error: unknown tool 'kanban_list'")
    assert "'parents' is not allowed" in results[3]
    assert results[4].startswith("created task 3 as a child of task 2")
    assert "already done" in results[6]
    with board_of(project) as board:
        assert (board.get(other).status, board.comments(other)) == ("blocked", [])
        child = board.get(3)
        assert (child.job, child.created_by, [p.id for p in board.parents(3)]) == ("echo", "task:2", [mine])
        assert board.get(mine).result == "my own result"


def test_task_tools_need_the_env_to_name_the_sessions_task(tmp_path, monkeypatch):
    """In-process: the availability checks with a real session on a real store."""
    from runner.settings import Settings

    settings = Settings.from_options(home=str(tmp_path / "home"), jobs=str(tmp_path / "jobs.yaml"))
    store = settings.store
    board = Board(store)
    t = board.add("t", now=utcnow())
    [c] = board.claim("w", now=utcnow(), lease_seconds=60)
    session = TaskSession(board, board.get(t), c.fence, settings)
    ctx = ToolContext(backend=None, kanban=session, settings=settings)  # type: ignore[arg-type]
    registry = discover()

    def names():
        return [e.name for e in registry.select(["kanban"], ctx)]

    monkeypatch.delenv("HERMES_KANBAN_TASK", raising=False)
    assert names() == ["kanban_create", "kanban_list"]
    monkeypatch.setenv("HERMES_KANBAN_TASK", str(t + 1))
    assert names() == []
    monkeypatch.setenv("HERMES_KANBAN_TASK", str(t))
    assert names() == ["kanban_block", "kanban_comment", "kanban_complete", "kanban_create", "kanban_show"]
    kid = session.create("child", "", priority=0, job=None)
    assert (board.get(kid).job, board.get(kid).status) == (None, "todo")  # the task's own job (None here)
    no_session = ToolContext(backend=None, settings=settings)  # type: ignore[arg-type]
    assert registry.select(["kanban"], no_session) == []
    board.close()
    Store.close(store)


@pytest.mark.parametrize("missing", ["HERMES_KANBAN_FENCE"])
def test_work_needs_the_fence(project, missing):
    res = project.run("kanban", "work", env=project.env(HERMES_KANBAN_TASK="1"))
    assert res.returncode == 2 and f"{missing} is not set" in res.stderr
