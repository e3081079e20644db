"""``context_from:``: other jobs' last successful outputs in the template as ``{{ context.NAME }}``,
capped; unknown names and undefined ``context.X`` are exit 2 with one line naming file, job, field."""

from __future__ import annotations

from runner.run.prompt import CONTEXT_CHARS
from runner.testing import final

JOBS = """\
jobs:
  fetch-a:
    prompt: fetch
  big-b:
    agent: false
    pre_run: "python3 -c \\"print('b' * 9000)\\""
  report:
    prompt: "A=[{{ context.fetch_a }}] B=[{{ context.big_b }}]"
    context_from: [fetch-a, big-b]
"""


def user_of(request) -> str:
    return request["body"]["messages"][1]["content"]


def test_outputs_of_other_jobs_render_capped_and_empty_before_any_success(project, fake):
    project.write_jobs(JOBS)
    fake.add(final("no runs yet"))
    assert project.cli("run-job", "report").exit_code == 0
    assert user_of(fake.requests[0]) == "A=[] B=[]"

    fake.add(final("alpha result"))
    assert project.cli("run-job", "fetch-a").exit_code == 0
    assert project.cli("run-job", "big-b").exit_code == 0
    fake.add(final("report done"))
    res = project.cli("run-job", "report")
    assert res.exit_code == 0, res.output
    user = user_of(fake.requests[2])
    assert user.startswith("A=[alpha result] B=[" + "b" * CONTEXT_CHARS + "\n[... 1,001 more characters not shown]]")


def test_a_failed_run_does_not_replace_the_last_successful_output(project, fake):
    project.write_jobs(JOBS)
    fake.add(final("good output"))
    assert project.cli("run-job", "fetch-a").exit_code == 0
    project.write_jobs(JOBS.replace("prompt: fetch", "prompt: fetch\n    max_iterations: 1"))
    from runner.testing import call

    fake.add(call("terminal", {"command": "true"}))  # the one turn ends without an answer: failed
    assert project.cli("run-job", "fetch-a").exit_code == 1
    fake.add(final("ok"))
    assert project.cli("run-job", "report").exit_code == 0
    assert user_of(fake.requests[-1]).startswith("A=[good output] B=[]")


def test_unknown_job_in_context_from_is_exit_2_naming_file_job_and_field(project, fake):
    project.write_jobs("jobs:\n  fetch-a:\n    prompt: x\n  report:\n    prompt: x\n    context_from: [fetch-b]\n")
    for args in (("jobs", "validate"), ("run-job", "report"), ("run-job", "fetch-a")):
        res = project.cli(*args)
        assert res.exit_code == 2, args
        [line] = res.stderr.strip().splitlines()
        where = f"{project.jobs_path.resolve()}: job report: context_from"
        assert line.endswith(f"{where}: unknown job 'fetch-b'; did you mean fetch-a?"), line
    assert not fake.requests


def test_self_and_colliding_names_are_errors(project):
    project.write_jobs(
        "jobs:\n  a-b:\n    prompt: x\n  a_b:\n    prompt: x\n  r:\n    prompt: x\n    context_from: [r, a-b, a_b]\n"
    )
    res = project.cli("jobs", "validate")
    assert res.exit_code == 2
    assert "job r: context_from: 'r' is this job (its own last output is {{ last_output }})" in res.stderr
    assert "job r: context_from: 'a_b' and 'a-b' are both context.a_b" in res.stderr


def test_the_static_check_knows_context(project):
    project.write_jobs(
        "jobs:\n  a:\n    prompt: x\n  r:\n    prompt: '{{ context.a }} {{ context.b }}'\n    context_from: [a]\n"
    )
    res = project.cli("jobs", "validate")
    assert res.exit_code == 2
    [line] = res.stderr.strip().splitlines()
    assert line.endswith(
        "job r: prompt: line 1: context.b is not defined ('b' is not in context_from: (dashes as underscores))"
    )
