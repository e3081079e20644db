"""``runner kanban add | list | show | move | comment | block | unblock | archive`` and their errors."""

import json

from tests.kanban_util import board_of

JOBS = "jobs:\n  echo:\n    agent: false\n    pre_run: echo hi\n"


def test_board_commands_end_to_end(project):
    project.write_jobs(JOBS)
    assert project.cli("kanban", "add", "Audit repo A", "--job", "echo", "--priority", "3").output.strip() == "1"
    res = project.cli("kanban", "add", "Write summary", "--job", "echo", "--parent", "1", "--body", "use A's notes")
    assert res.exit_code == 0 and res.output.strip() == "2"
    added = json.loads(project.cli("kanban", "add", "Third", "--job", "echo", "--max-attempts", "5", "--json").output)
    assert added["status"] == "ready" and added["max_attempts"] == 5

    board = project.cli("kanban", "list").output
    assert board.index("TODO (1)") < board.index("READY (2)")
    assert "waits for #1 (ready)" in board and "Audit repo A" in board
    listed = json.loads(project.cli("kanban", "list", "--json").output)
    assert [t["id"] for t in listed] == [1, 2, 3]  # priority, then age

    assert project.cli("kanban", "comment", "2", "mind the tests").exit_code == 0
    assert project.cli("kanban", "block", "3", "needs credentials").output.strip() == "task 3: blocked"
    assert "needs credentials" in project.cli("kanban", "list", "--status", "blocked").output
    assert project.cli("kanban", "unblock", "3").output.strip() == "task 3: ready"
    assert project.cli("kanban", "move", "1", "done").output.strip() == "task 1: done"
    assert project.cli("kanban", "archive", "#3").output.strip() == "task 3: archived"
    assert "Third" not in project.cli("kanban", "list").output
    assert "Third" in project.cli("kanban", "list", "--all").output

    shown = json.loads(project.cli("kanban", "show", "2", "--json").output)
    assert shown["task"]["status"] == "ready" and shown["task"]["body"] == "use A's notes"
    assert [p["id"] for p in shown["parents"]] == [1]
    assert shown["comments"][0]["body"] == "mind the tests"
    assert [e["kind"] for e in shown["events"]] == ["created", "commented", "promoted"]
    text = project.cli("kanban", "show", "2").output
    assert "parents  #1 Audit repo A (done)" in text and "mind the tests" in text


def test_bad_input_is_one_line_exit_2(project):
    project.write_jobs(JOBS)
    cases = [
        (("kanban", "add", "no job"), "no job for this task"),
        (("kanban", "add", "x", "--job", "nope"), "unknown job 'nope'"),
        (("kanban", "add", "x", "--job", "echo", "--parent", "7"), "no task 7"),
        (("kanban", "show", "abc"), "task id must be a number"),
        (("kanban", "show", "42"), "no task 42"),
        (("kanban", "move", "1", "running"), None),
        (
            (
                "kanban",
                "work",
            ),
            "HERMES_KANBAN_TASK is not set",
        ),
    ]
    project.cli("kanban", "add", "t", "--job", "echo")
    for args, message in cases:
        res = project.run(*args)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in res.stderr, res.stderr
        if message:
            assert message in lines[0], lines[0]


def test_default_job_from_config(project):
    project.write_jobs(JOBS)
    project.home.mkdir(parents=True, exist_ok=True)
    (project.home / "config.yaml").write_text("kanban: {default_job: echo, max_attempts: 4}\n")
    assert project.cli("kanban", "add", "uses the default").exit_code == 0
    with board_of(project) as board:
        task = board.get(1)
    assert task.job is None and task.max_attempts == 4
