"""Clear template errors (issue 32.8) through the real `runner run-job` and `jobs validate`: an
undefined variable, an undefined field and a syntax error each say the job, the template, the line
and the name in one line, without a traceback; one met only with the run's real values ends the
run ``failed/template`` before any model call."""

from __future__ import annotations

from runner.testing import final
from tests.run.test_run_job import runs

KNOWN = "context, env, job, last_output, now, pre_run, run, today, trigger, upstream, vars, yesterday"


def one_line(text: str) -> str:
    [line] = [ln for ln in text.strip().splitlines() if ln.strip()]
    return line


def test_an_undefined_field_met_at_run_time_fails_the_run_clearly(project, fake):
    fake.add(final("never asked"))
    project.write_jobs(
        "jobs:\n  t:\n    prompt: \"Report\\n{% if pre_run.stdout %}\\n{{ pre_run.stdot }}\\n{% endif %}\"\n"
        "    pre_run: echo data\n    toolsets: []\n"
    )
    res = project.run("run-job", "t")
    assert res.returncode == 1 and "Traceback" not in res.stderr
    [row] = runs(project)
    message = "job t: prompt: line 3: pre_run has no field 'stdot' (known: stdout, exit_code, stderr)"
    assert (row["status"], row["reason"], row["error"]) == ("failed", "template", message)
    assert one_line(res.stderr) == f"run {row['id']}: failed (template): {message}"
    assert fake.requests == []


def test_an_undefined_variable_in_a_template_file_names_the_file(project, fake):
    project.write("jobs/t.md.j2", "Report\n{% if pre_run.stdout %}\nfor {{ repo }}\n{% endif %}\n")
    project.write_jobs("jobs:\n  t:\n    prompt: jobs/t.md.j2\n    pre_run: echo data\n    toolsets: []\n")
    res = project.run("run-job", "t")
    assert res.returncode == 1 and "Traceback" not in res.stderr
    [row] = runs(project)
    assert row["error"] == f"job t: prompt jobs/t.md.j2: line 3: undefined template variable 'repo' (known: {KNOWN})"
    assert fake.requests == []


def test_a_typo_found_before_the_run_is_exit_2_with_no_row(project, fake):
    project.write_jobs("jobs:\n  t:\n    prompt: \"For {{ vars.repo }}:\\n{{ vars.repos }}\"\n    vars: {repo: x}\n")
    res = project.run("run-job", "t")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert one_line(res.stderr) == "error: job t: prompt: line 2: vars has no field 'repos' (known: repo)"
    assert runs(project) == [] and fake.requests == []


def test_a_syntax_error_is_caught_by_validate_and_run_job(project, fake):
    project.write("jobs/t.md.j2", "Report\n{{ vars.name \n")
    project.write_jobs("jobs:\n  t:\n    prompt: jobs/t.md.j2\n")
    message = "job t: prompt jobs/t.md.j2: line 2: template syntax error: unexpected end of template, expected 'end of print statement'."
    res = project.run("run-job", "t")
    assert res.returncode == 2 and one_line(res.stderr) == f"error: {message}"
    validate = project.run("jobs", "validate")
    assert validate.returncode == 2 and "Traceback" not in validate.stderr
    assert one_line(validate.stderr) == f"{project.jobs_path}: {message}"
    assert runs(project) == []


def test_validate_reads_fields_of_pre_run_job_and_run(project):
    project.write_jobs(
        "jobs:\n  t:\n    prompt: \"{{ job.name }} {{ run.id }} {{ pre_run.stderr }}\\n"
        "{% if pre_run.stdout %}{{ pre_run.stdot }}{% endif %} {{ job.nmae }}\"\n"
    )
    res = project.run("jobs", "validate")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert lines == [
        f"{project.jobs_path}: job t: prompt: line 2: pre_run has no field 'stdot' (known: stdout, exit_code, stderr)",
        f"{project.jobs_path}: job t: prompt: line 2: job has no field 'nmae' (known: name, schedule, description)",
    ]
