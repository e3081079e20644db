"""``kanban_create`` cannot hand work to a job with more latitude (issue 29): a scripted model in
an ``approvals: deny`` job files tasks for an ``approve`` job, a ``manual`` one and a ``deny`` job
with an extra ``allow:`` pattern; none is created, the tool error names the job and why, and a
dispatcher afterwards runs nothing of them (the marker their pre_run would write never appears).
Tasks for jobs no looser than the creator's are still created."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runner.config.jobs import JobSpec
from runner.safety.latitude import Approvals, Latitude
from runner.testing import call, final
from tests.kanban_util import board_of, dispatcher, status_of, wait_for, write_config

JOBS = """\
jobs:
  triage:
    prompt: Triage the backlog.
    toolsets: [kanban]
    approvals: deny
    allow: ["git push*"]
  worker:
    prompt: Work on your kanban task.
    toolsets: [kanban]
    approvals: deny
  deploy:
    agent: false
    approvals: approve
    pre_run: touch {marks}/deploy-ran
  careful:
    agent: false
    approvals: manual
    pre_run: touch {marks}/careful-ran
  widened:
    agent: false
    approvals: deny
    allow: ["git push*", "rm -rf *"]
    pre_run: touch {marks}/widened-ran
  tidy:
    agent: false
    approvals: deny
    allow: ["git push*"]
    pre_run: echo tidy
"""


def tool_results(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["body"]["messages"] if m["role"] == "tool"]


def _project(project: Any, tmp_path: Path) -> Path:
    marks = tmp_path / "marks"
    marks.mkdir()
    write_config(project)
    project.write_jobs(JOBS.format(marks=marks))
    return marks


def test_a_deny_job_cannot_file_tasks_for_looser_jobs(project: Any, fake: Any, tmp_path: Path) -> None:
    marks = _project(project, tmp_path)
    fake.add(
        call("kanban_create", {"title": "ship it", "job": "deploy"}),
        call("kanban_create", {"title": "ask first", "job": "careful"}),
        call("kanban_create", {"title": "clean up", "job": "widened"}),
        call("kanban_create", {"title": "tidy", "job": "tidy"}),  # the same latitude: allowed
        final("Filed what I could."),
    )
    res = project.run("run-job", "triage")
    assert res.returncode == 0, res.stderr
    results = tool_results(fake.requests[-1])
    assert results[0].startswith("error: refused: no task for job 'deploy': it may do more without a person")
    assert "this run's job 'triage' (approvals: approve is looser than approvals: deny)" in results[0]
    assert "(approvals: manual is looser than approvals: deny)" in results[1] and "'careful'" in results[1]
    assert "job 'widened'" in results[2] and "allow: 'rm -rf *' is not in the other job's allow: list" in results[2]
    assert results[3] == "created task 1"
    with board_of(project) as board:
        assert [(t.id, t.job) for t in board.tasks()] == [(1, "tidy")]  # nothing else on the board
    with dispatcher(project):
        wait_for(lambda: status_of(project, 1) == "done", timeout=30, what="the allowed task done")
    assert not list(marks.iterdir())  # nothing of deploy, careful or widened ran


def test_inside_a_task_a_deny_job_cannot_file_a_child_for_an_approve_job(
    project: Any, fake: Any, tmp_path: Path
) -> None:
    marks = _project(project, tmp_path)
    mine = int(project.cli("kanban", "add", "look around", "--job", "worker").output)
    fake.add(
        call("kanban_create", {"title": "ship it", "job": "deploy"}),
        call("kanban_complete", {"result": "looked around"}),
        final("Done."),
    )
    with dispatcher(project):
        wait_for(lambda: status_of(project, mine) == "done", timeout=30, what="the worker's task done")
        wait_for(lambda: len(fake.requests) == 3, timeout=10, what="the final turn")
    refused = tool_results(fake.requests[-1])[0]
    assert refused.startswith("error: refused: no task for job 'deploy'") and "'worker'" in refused
    with board_of(project) as board:
        assert [t.id for t in board.tasks()] == [mine]
    assert not (marks / "deploy-ran").exists()


def test_the_default_job_is_judged_too(project: Any, fake: Any, tmp_path: Path) -> None:
    """No ``job`` argument: the task would run kanban.default_job, which is looser here."""
    _project(project, tmp_path)
    (project.home / "config.yaml").write_text("kanban: {default_job: deploy}\n")
    fake.add(call("kanban_create", {"title": "whatever"}), final("ok"))
    assert project.run("run-job", "triage").returncode == 0
    assert tool_results(fake.requests[-1])[0].startswith("error: refused: no task for job 'deploy'")
    with board_of(project) as board:
        assert board.tasks() == []


def test_approvals_enum_is_the_jobs_yaml_vocabulary() -> None:
    assert JobSpec.model_fields["approvals"].annotation is Approvals  # jobs.yaml's values are the enum's
    ranks = [a.rank for a in (Approvals.DENY, Approvals.MANUAL, Approvals.SMART, Approvals.APPROVE)]
    assert ranks == [0, 1, 2, 3]


def _spec(approvals: str, allow: tuple[str, ...] = (), sandbox: bool = True) -> JobSpec:
    return JobSpec(prompt="go", approvals=approvals, allow=list(allow), sandbox=sandbox)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "target,creator,wider",
    [
        (_spec("deny"), _spec("deny"), False),
        (_spec("deny"), _spec("approve"), False),
        (_spec("manual"), _spec("approve"), False),
        (_spec("manual"), _spec("deny"), True),
        (_spec("approve"), _spec("manual"), True),
        (_spec("smart"), _spec("manual"), True),  # the judge model may approve what only a person could
        (_spec("approve"), _spec("smart"), True),
        (_spec("smart"), _spec("approve"), False),
        (_spec("deny", ("a*",)), _spec("deny"), True),
        (_spec("deny", ("a*",)), _spec("deny", ("a*", "b*")), False),
        (_spec("deny", ("a*", "b*")), _spec("approve", ("a*",)), True),
        (_spec("deny", sandbox=False), _spec("approve"), True),  # unsandboxed is wider than any sandboxed
        (_spec("deny", sandbox=False), _spec("deny", sandbox=False), False),
        (_spec("deny"), _spec("deny", sandbox=False), False),
    ],
)
def test_latitude_order(target: JobSpec, creator: JobSpec, wider: bool) -> None:
    assert (Latitude.of(target).wider_than(Latitude.of(creator)) is not None) is wider
