"""Durable kanban attempts (issue 33): the worker of an agent task is killed with SIGKILL after
turn 3; the board's next attempt resumes the run from its journal (turns 1-3 are not asked again,
their commands do not run again) and is told which attempt it is, why the last one ended and the
comments its history does not hold. ``resume: off`` starts over, as before. Real dispatcher, real
worker processes, the fake model server."""

from __future__ import annotations

import json
import os
import signal

from runner.clock import utcnow
from runner.testing import call, final, hang
from tests.kanban_util import board_of, dispatcher, status_of, wait_for, write_config
from tests.servehelp import rows

JOBS = """\
jobs:
  agent:
    prompt: Work on your kanban task.
    toolsets: [kanban, terminal]
{extra}"""


def _user_texts(request):
    return [m["content"] for m in request["body"]["messages"] if m["role"] == "user"]


def _kill_the_worker(project, task_id):
    with board_of(project) as board:
        pid = board.get(task_id).worker_pid
    assert pid, "the task's worker recorded no pid"
    os.kill(pid, signal.SIGKILL)


def _script(fake, marker):
    for n in (1, 2):
        fake.add(call("terminal", {"command": f"echo turn-{n} >> {marker}"}))
    # turn 3's command takes a while: a comment written meanwhile is given before turn 4's request
    fake.add(call("terminal", {"command": f"sleep 2; echo turn-3 >> {marker}"}))
    fake.add(hang(60))  # turn 4's first request: the worker is killed while it waits


def test_a_killed_kanban_worker_is_resumed_by_the_next_attempt(project, fake):
    write_config(project, retry_backoff=0.5)
    project.write_jobs(JOBS.format(extra=""))
    _script(fake, "marker.txt")  # in the task's workspace, which the next attempt works in too
    fake.add(
        call("terminal", {"command": "echo turn-4 >> marker.txt"}),
        call("kanban_complete", {"result": "four turns, each once"}),
        final("done"),
    )
    with board_of(project) as board:
        t = board.add("count to four", now=utcnow(), body="Append one line per turn.", job="agent")
    with dispatcher(project):
        wait_for(lambda: len(fake.requests) >= 3, 30, what="turn 3's request")
        said = project.cli("kanban", "comment", str(t), "early: use the marker file")
        assert said.exit_code == 0, said.output
        wait_for(lambda: len(fake.requests) >= 4, 30, what="turn 4's request")
        _kill_the_worker(project, t)
        wait_for(lambda: status_of(project, t) == "ready", 10, what="the task ready again")
        late = project.cli("kanban", "comment", str(t), "late: say four when you finish")  # no attempt runs
        assert late.exit_code == 0, late.output
        wait_for(lambda: status_of(project, t) == "done", 60, what="the task done by the next attempt")

    marker = project.home / "workspaces" / str(t) / "marker.txt"
    assert marker.read_text().splitlines() == ["turn-1", "turn-2", "turn-3", "turn-4"]  # each command once
    sizes = [len(r["body"]["messages"]) for r in fake.requests]
    # turns 1-3 asked once, turn 4's hung request asked again (with the early comment, and the
    # resume note as one more message), then turns 5 and 6
    assert len(fake.requests) == 7, sizes
    resumed_request = fake.requests[4]
    assert sizes[4] == sizes[3] + 1, sizes
    assert resumed_request["body"]["messages"][:-1] == fake.requests[3]["body"]["messages"]  # the same history
    note = _user_texts(resumed_request)[-1]
    assert "attempt 2 of" in note and f"kanban task {t}" in note and "exited with code -9" in note, note
    assert "late: say four when you finish" in note
    assert "early: use the marker file" not in note  # the history has it already (given before turn 4)
    assert any("early: use the marker file" in text for text in _user_texts(resumed_request)[:-1])
    steers = rows(project.home, "SELECT run_id, outcome FROM control_requests WHERE kind='steer'")
    assert [s["outcome"].split(":")[0] for s in steers] == ["delivered"], steers  # given before the crash, replayed

    runs = rows(project.home, "SELECT * FROM runs ORDER BY attempt")
    assert [(r["attempt"], r["status"], r["task_id"]) for r in runs] == [(1, "unknown", str(t)), (2, "succeeded", str(t))]
    assert runs[1]["parent_run"] == runs[0]["id"]
    [resumed] = rows(project.home, "SELECT payload FROM run_events WHERE kind='resumed'")
    payload = json.loads(resumed["payload"])
    assert (payload["from_run"], payload["turn"], payload["results"]) == (runs[0]["id"], 3, 3)
    with board_of(project) as board:
        task = board.get(t)
        assert (task.status, task.attempts, task.result) == ("done", 2, "four turns, each once")


def test_resume_off_starts_a_kanban_task_over(project, fake):
    write_config(project, retry_backoff=0.5)
    project.write_jobs(JOBS.format(extra="    resume: off\n"))
    _script(fake, "marker.txt")
    fake.add(call("kanban_complete", {"result": "started over"}), final("done"))
    with board_of(project) as board:
        t = board.add("count again", now=utcnow(), job="agent")
    with dispatcher(project):
        wait_for(lambda: len(fake.requests) >= 4, 30, what="turn 4's request")
        _kill_the_worker(project, t)
        wait_for(lambda: status_of(project, t) == "done", 60, what="the task done by the next attempt")
    retry = fake.requests[4]["body"]["messages"]
    assert len(retry) == 2, "the retry starts from the first turn (system and prompt)"
    assert "This is attempt 2 of" in retry[1]["content"]  # the board's retry prompt, as before
    runs = rows(project.home, "SELECT * FROM runs ORDER BY created_at")
    assert [(r["attempt"], r["parent_run"], r["status"]) for r in runs] == [(1, None, "unknown"), (1, None, "succeeded")]
    assert rows(project.home, "SELECT * FROM run_events WHERE kind='resumed'") == []
