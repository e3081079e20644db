"""Steering (issue 32 item 2): ``runner runs say RUN MESSAGE`` and a kanban comment on a running
task put a message in the run's queue (a ``steer`` row of ``control_requests``, the channel a
cancel uses); the run's watch sees it and the loop gives it to the model as a user message before
its next request, never between a turn's tool calls and their results. Real ``run-job``, serve and
kanban worker processes; the model is the fake server. The API's rules and the text's bound are
tested on a real store."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.clock import utcnow
from runner.errors import UsageError
from runner.events import Steer
from runner.run.steer import Inbox
from runner.statuses import RunStatus, Trigger
from runner.store import Store, ledger
from runner.store.board import Board
from runner.store.control import (
    STEER_DELIVERED,
    STEER_MAX_CHARS,
    STEER_UNDELIVERED,
    ControlRefused,
    comment_task,
    request_steer,
    run_requests,
    settle_steers,
    steer_text,
    steers_of,
)
from runner.testing import call, final
from runner.testing.fakeopenai import Reply
from tests.conftest import Project
from tests.servehelp import in_a_tool_call, job_rows, rows, serve_factory, wait_for, write_config

GATE = "gate"
#: a first tool call that lasts until the test opens the gate (after its message was sent and seen)
GATED = f"while [ ! -e {GATE} ]; do sleep 0.05; done; echo passed"
SEEN = 1.0  # seconds for the run's watch (a look every 0.1 s) to see a message, on a loaded machine
SAID = "Also check the logs, please."


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store.open(tmp_path / "runner.db")
    yield s
    s.close()


@pytest.fixture
def serve(project):
    yield from serve_factory(project)


def one_line_exit_2(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    return res.stderr


def finish(proc: subprocess.Popen[str], timeout: float = 30) -> tuple[int, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out + err


def open_gate(project: Project) -> None:
    time.sleep(SEEN)
    (project.root / GATE).touch()


def second_request(fake: Any) -> list[dict[str, Any]]:
    return list(fake.requests[1]["body"]["messages"])


def assert_steered_after_the_tool_results(messages: list[dict[str, Any]], text: str) -> None:
    """The last messages of the request: the turn with its call, the call's result, the message."""
    assert [m["role"] for m in messages[-3:]] == ["assistant", "tool", "user"], messages[-3:]
    assert "passed" in messages[-2]["content"]
    assert text in messages[-1]["content"]


def kinds(project: Project, run_id: str) -> list[str]:
    res = project.run("runs", "show", run_id, "--json")
    assert res.returncode == 0, res.stderr
    return [e["kind"] for e in json.loads(res.stdout)["events"]]


# -- the API on a real store -------------------------------------------------------------------------
def test_a_message_is_queued_for_a_running_run_and_settled_at_its_end(store: Store) -> None:
    run_id = ledger.open_run(store, job="j", trigger=Trigger.MANUAL)
    first = request_steer(store, run_id[-6:], f"  {SAID}  ", by="alice@host")  # a unique part of the id
    second = request_steer(store, run_id, "and then stop", by="web:admin")
    cancel, steers = run_requests(store.conn, run_id)
    assert cancel is None
    assert steers == [Steer(first, "alice@host", SAID), Steer(second, "web:admin", "and then stop")]
    inbox = Inbox()
    inbox.put(steers)
    inbox.put(steers)  # the watch's next look: nothing twice
    assert run_requests(store.conn, run_id, seen=inbox.seen()) == (None, [])
    assert [s.request_id for s in inbox.take()] == [first, second]
    assert inbox.take() == [] and inbox.left() == []
    third = request_steer(store, run_id, "too late", by="alice@host")  # after the model's last request
    with store.transaction():
        settle_steers(store, run_id, inbox.delivered(), now=utcnow())
        ledger.finish(store, run_id, RunStatus.SUCCEEDED)
    outcomes = {r["id"]: r["outcome"] for r in steers_of(store, run_id)}
    assert outcomes == {first: STEER_DELIVERED, second: STEER_DELIVERED, third: STEER_UNDELIVERED}
    with pytest.raises(ControlRefused) as info:
        request_steer(store, run_id, "hello?", by="alice@host")
    assert info.value.reason == "not_running" and info.value.exit_code == 2 and "succeeded" in str(info.value)


def test_refused_for_an_unknown_run_a_subagent_and_from_inside_a_run(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ControlRefused) as info:
        request_steer(store, "nope", "hi", by="a@h")
    assert info.value.reason == "not_found"
    parent = ledger.open_run(store, job="j", trigger=Trigger.MANUAL)
    child = ledger.open_run(store, job="j", trigger=Trigger.DELEGATE, parent_run_id=parent)
    with pytest.raises(ControlRefused) as info:
        request_steer(store, child, "hi", by="a@h")
    assert info.value.reason == "subagent" and parent in str(info.value)
    monkeypatch.setenv("RUNNER_RUN_ID", parent)
    with pytest.raises(UsageError, match="refused to steer a run: this process was started from inside a run"):
        request_steer(store, parent, "hi", by="a@h")
    assert steers_of(store, parent) == [] and steers_of(store, child) == []


def test_a_cancel_and_messages_are_read_in_one_look(store: Store) -> None:
    from runner.store.control import request_cancel

    run_id = ledger.open_run(store, job="j", trigger=Trigger.MANUAL)
    request_steer(store, run_id, "one", by="a@h")
    request_cancel(store, run_id, by="b@h")
    cancel, steers = run_requests(store.conn, run_id)
    assert cancel == "b@h" and [s.text for s in steers] == ["one"]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "the message is empty"),
        ("   \n\t ", "the message is empty"),
        ("x" * (STEER_MAX_CHARS + 1), f"the message is 4,001 characters; the limit is {STEER_MAX_CHARS:,}"),
        ("a\x00b", "the message holds a NUL character"),
    ],
)
def test_bad_messages_are_one_line_errors(text: str, problem: str) -> None:
    with pytest.raises(UsageError) as info:
        steer_text(text)
    assert str(info.value) == problem and info.value.exit_code == 2


@given(st.text(max_size=STEER_MAX_CHARS + 200))
def test_steer_text_takes_exactly_the_bounded_messages(text: str) -> None:
    stripped = text.strip()
    try:
        message = steer_text(text)
    except UsageError as exc:
        assert not stripped or len(stripped) > STEER_MAX_CHARS or "\x00" in stripped
        assert "\n" not in str(exc)
        return
    assert message == stripped and 0 < len(message) <= STEER_MAX_CHARS and "\x00" not in message


def test_a_comment_on_a_running_task_goes_to_its_run(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    now = utcnow()
    board = Board(store)
    try:
        idle = board.add("idle", now=now, job="k")
        task = board.add("busy", now=now, job="k")
        store.execute("UPDATE tasks SET status='running' WHERE id=?", (task,))
    finally:
        board.close()
    run_id = ledger.open_run(store, job="k", trigger=Trigger.KANBAN, task_id=str(task))
    done = comment_task(store, task, "use the staging database", by="carol")
    assert done.steered == run_id
    [steer] = steers_of(store, run_id)
    assert steer["requested_by"] == "carol" and steer["message"].endswith("use the staging database")
    assert "kanban task" in steer["message"]
    long = comment_task(store, task, "y" * (STEER_MAX_CHARS * 2), by="carol")
    assert long.steered == run_id
    cut = steers_of(store, run_id)[1]["message"]
    assert len(cut) == STEER_MAX_CHARS and cut.endswith("kanban_show has it whole]")
    quiet = comment_task(store, idle, "later", by="carol")
    assert quiet.steered is None and quiet.why is None
    board = Board(store)
    try:
        assert [c["body"] for c in board.comments(task)] == ["use the staging database", "y" * (STEER_MAX_CHARS * 2)]
    finally:
        board.close()
    with pytest.raises(ControlRefused) as info:
        comment_task(store, 99, "hi", by="carol")
    assert info.value.reason == "not_found"
    monkeypatch.setenv("RUNNER_RUN_ID", run_id)  # a run's own command: stored, sent nowhere
    inside = comment_task(store, task, "from inside", by="agent")
    assert inside.steered is None and "inside a run" in str(inside.why)
    assert len(steers_of(store, run_id)) == 2


# -- real processes ------------------------------------------------------------------------------
def test_say_reaches_the_model_after_the_tool_results(project: Project, fake: Any) -> None:
    fake.add(call("terminal", {"command": GATED}), final("done"))
    project.write_jobs("jobs:\n  s:\n    prompt: go\n")
    proc = project.start_job("s", fake)
    run = in_a_tool_call(project.home)
    res = project.run("runs", "say", run["id"], SAID)
    assert res.returncode == 0 and f"message queued for run {run['id']}" in res.stdout, res.stderr
    open_gate(project)
    code, out = finish(proc)
    assert code == 0, out
    messages = second_request(fake)
    assert_steered_after_the_tool_results(messages, SAID)
    assert "@" in messages[-1]["content"]  # who sent it
    steps = kinds(project, run["id"])
    assert steps.index("tool_result") < steps.index("steered") < len(steps) - steps[::-1].index("request") - 1
    shown = project.run("runs", "show", run["id"]).stdout
    assert "given to the model" in shown and SAID in shown
    [request] = rows(project.home, "SELECT * FROM control_requests WHERE kind='steer'")
    assert request["outcome"] == "delivered" and request["handled_at"] and request["message"] == SAID


def test_a_message_after_the_last_model_request_is_not_delivered(project: Project, fake: Any) -> None:
    fake.add(Reply(content="done", hang=4))  # the only request: the message comes while it is asked
    project.write_jobs("jobs:\n  s:\n    prompt: go\n")
    proc = project.start_job("s", fake)
    [run] = wait_for(lambda: rows(project.home), 15, what="the run")
    assert project.run("runs", "say", run["id"], SAID).returncode == 0
    code, out = finish(proc)
    assert code == 0, out
    assert len(fake.requests) == 1
    assert "steer_undelivered" in kinds(project, run["id"])
    assert "not delivered" in project.run("runs", "show", run["id"]).stdout
    [request] = rows(project.home, "SELECT * FROM control_requests WHERE kind='steer'")
    assert request["outcome"].startswith("undelivered") and request["handled_at"]


def test_a_parked_run_gets_the_message_after_the_answer(project: Project, fake: Any) -> None:
    (project.root / "build").mkdir()
    fake.add(call("terminal", {"command": "rm -rf build && echo passed"}), final("cleaned"))
    project.write_jobs("jobs:\n  m:\n    prompt: go\n    approvals: manual\n")
    proc = project.start_job("m", fake)
    [request] = wait_for(
        lambda: rows(project.home, "SELECT * FROM approval_requests WHERE status='pending'"), 30, what="the park"
    )
    assert project.run("runs", "say", request["run_id"], SAID).returncode == 0
    time.sleep(SEEN)
    assert len(fake.requests) == 1  # still parked: nothing was sent meanwhile
    assert project.run("approvals", "grant", request["id"]).returncode == 0
    code, out = finish(proc)
    assert code == 0, out
    assert_steered_after_the_tool_results(second_request(fake), SAID)


def test_say_refusals_are_one_line_exit_2(project: Project, fake: Any) -> None:
    project.write_jobs("jobs:\n  s:\n    prompt: go\n")
    store = project.open_store()
    try:
        done = ledger.open_run(store, job="s", trigger=Trigger.MANUAL)
        ledger.finish(store, done, RunStatus.SUCCEEDED)
        parent = ledger.open_run(store, job="s", trigger=Trigger.MANUAL)
        child = ledger.open_run(store, job="s", trigger=Trigger.DELEGATE, parent_run_id=parent)
    finally:
        store.close()
    assert "is succeeded, not running" in one_line_exit_2(project.run("runs", "say", done, "hi"))
    assert "no run" in one_line_exit_2(project.run("runs", "say", "20990101-000000-abcdef", "hi"))
    too_long = one_line_exit_2(project.run("runs", "say", parent, "x" * 5000))
    assert "5,000 characters; the limit is 4,000" in too_long
    assert "the message is empty" in one_line_exit_2(project.run("runs", "say", parent, "  "))
    assert f"subagent of run {parent}" in one_line_exit_2(project.run("runs", "say", child, "hi"))
    inside = project.run("runs", "say", parent, "hi", env=project.env(RUNNER_RUN_ID=child))
    assert "refused to steer a run" in one_line_exit_2(inside)
    assert rows(project.home, "SELECT * FROM control_requests") == []


def test_say_to_a_serve_run(project: Project, fake: Any, serve: Any) -> None:
    """serve's worker runs the job; the message crosses processes through the store alone (on the
    PostgreSQL pass: a PostgreSQL store)."""
    write_config(project)
    fake.add(call("terminal", {"command": GATED}), final("done"))
    project.write_jobs("jobs:\n  s:\n    prompt: go\n")
    daemon = serve().started()
    assert project.run("jobs", "trigger", "s").returncode == 0
    run = in_a_tool_call(project.home)
    assert project.run("runs", "say", run["id"], SAID).returncode == 0
    open_gate(project)
    wait_for(lambda: [r for r in job_rows(project.home, "s") if r["status"] == "succeeded"], 30, what="the run")
    assert_steered_after_the_tool_results(second_request(fake), SAID)
    assert "steered" in kinds(project, run["id"])
    assert daemon.stop() == 0


def test_a_kanban_comment_reaches_the_running_workers_model(project: Project, fake: Any) -> None:
    from tests.kanban_util import board_of, dispatcher, status_of
    from tests.kanban_util import write_config as kanban_config

    kanban_config(project)
    project.write_jobs(
        "jobs:\n  agent:\n    prompt: Work on your kanban task.\n    toolsets: [terminal, kanban]\n    workdir: .\n"
    )
    with board_of(project) as board:
        task = board.add("look at the logs", now=utcnow(), job="agent")
    fake.add(call("terminal", {"command": GATED}), call("kanban_complete", {"result": "looked"}), final("done"))
    with dispatcher(project):
        in_a_tool_call(project.home)
        res = project.run("kanban", "comment", str(task), "Only the last hour matters.")
        assert res.returncode == 0 and "sent to its running run" in res.stdout, (res.stdout, res.stderr)
        open_gate(project)
        wait_for(lambda: status_of(project, task) == "done", 30, what="the task done")
    assert_steered_after_the_tool_results(second_request(fake), "Only the last hour matters.")
    assert "A new comment on your kanban task" in second_request(fake)[-1]["content"]
    res = project.run("kanban", "comment", str(task), "thanks")  # done: stored, sent nowhere
    assert res.returncode == 0 and res.stdout.strip() == f"task {task}: comment added"
