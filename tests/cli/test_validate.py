"""`runner jobs validate`, `doctor` and the edges of issue 14 through the real `runner` command:
every bad input is one line naming the file, job or field, exit code 2, no traceback."""

from __future__ import annotations

import json

import pytest

from runner.testing import final


def one_error(res, *words: str) -> str:
    """The result is a clean exit 2 whose stderr names ``words`` (one problem: one line)."""
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    for word in words:
        assert word in res.stderr, res.stderr
    return res.stderr


def test_undefined_template_variable_and_vars_attribute(project):
    project.write_jobs(
        """
        jobs:
          a:
            vars: {repo: x}
            env_vars: [TOKEN]
            prompt: "{{ vars.repo }} {{ vars.who }} {{ vars['what'] }} {{ env.TOKEN }} {{ env.HOME }} {{ nope }}"
        """
    )
    err = one_error(project.run("jobs", "validate"), "job a: prompt")
    lines = err.strip().splitlines()
    assert len(lines) == 4, err
    assert "undefined template variable 'nope'" in err
    assert "vars.who is not defined" in err and "vars.what is not defined" in err
    assert "env.HOME is not defined" in err and "vars.repo" not in err and "env.TOKEN" not in err


def test_known_names_loops_and_sets_are_not_undefined(project):
    project.write(
        "p.md.j2",
        "{{ now }} {{ today }} {{ yesterday }} {{ job.name }} {{ run.id }} {{ pre_run.stdout }} {{ last_output }}\n"
        "{% set x = 1 %}{% for i in range(3) %}{{ i }}{{ x }}{% endfor %}{{ vars.a | default('b') }}\n",
    )
    project.write_jobs("jobs:\n  a:\n    vars: {a: 1}\n    prompt: p.md.j2\n")
    res = project.run("jobs", "validate")
    assert res.returncode == 0 and "all valid" in res.stdout, res.stderr


def test_template_file_problems_name_the_file(project):
    project.write("p.md.j2", "line one\n{{ vars.who }}\n")
    project.write_jobs("jobs:\n  a:\n    prompt: p.md.j2\n")
    one_error(project.run("jobs", "validate"), "p.md.j2: line 2: vars.who is not defined")


def test_unknown_provider_in_model_list(project):
    project.write_jobs("jobs:\n  a:\n    prompt: hi\n    model: [default, backup]\n")
    one_error(project.run("jobs", "validate"), "job a: model: unknown provider 'backup'")


def test_auxiliary_provider_and_budget_reservation_are_checked(project):
    config = project.write("config.yaml", "auxiliary: nowhere\nbudgets: {daily_usd: 5}\n", mode=0o600)
    project.write_jobs("jobs:\n  a:\n    prompt: hi\n  b:\n    prompt: hi\n    budget: {max_cost_usd: 1}\n")
    res = project.run("--config", str(config), "jobs", "validate")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "job a: auxiliary: unknown provider 'nowhere'" in res.stderr
    assert "job b: auxiliary: unknown provider 'nowhere'" in res.stderr
    config.write_text("budgets: {daily_usd: 5}\n")
    one_error(project.run("--config", str(config), "jobs", "validate"), "job a: budget.max_cost_usd is not set")


def test_one_shot_in_the_past(project):
    project.write_jobs("jobs:\n  a:\n    prompt: hi\n    schedule: '2020-01-01T09:00'\n")
    one_error(project.run("jobs", "validate"), "job a: schedule: 2020-01-01T09:00 is in the past")


def test_missing_pre_run_script(project):
    project.write_jobs("jobs:\n  a:\n    agent: false\n    pre_run: scripts/check.sh --all\n")
    one_error(project.run("jobs", "validate"), "job a: pre_run: script scripts/check.sh not found")
    project.write("scripts/check.sh", "echo ok\n")
    assert project.run("jobs", "validate").returncode == 0


def test_unknown_skill(project):
    project.write("skills/known/SKILL.md", "---\nname: known\ndescription: a known skill\n---\nDo it.\n")
    project.write_jobs("jobs:\n  a:\n    prompt: hi\n    skills: [known, nosuch]\n")
    err = one_error(project.run("jobs", "validate"), "job a: skills: no skill named 'nosuch'")
    assert "'known'" not in err


def test_duplicate_keys_name_both_lines(project):
    project.write_jobs("jobs:\n  a:\n    prompt: hi\n    approvals: approve\n    approvals: deny\n")
    err = one_error(project.run("jobs", "validate"), "duplicate key 'approvals'", "lines 4 and 5")
    assert len(err.strip().splitlines()) == 1


def test_duplicate_key_in_config_yaml(project):
    config = project.write("config.yaml", "timezone: UTC\ntimezone: Europe/Berlin\n", mode=0o600)
    project.write_jobs("jobs:\n  a:\n    prompt: hi\n")
    one_error(project.run("--config", str(config), "jobs", "validate"), "config.yaml", "duplicate key 'timezone'")


def test_missing_config_and_jobs_files_are_errors(project):
    project.write_jobs("jobs:\n  a:\n    prompt: hi\n")
    one_error(project.run("--config", "/nonexistent/config.yaml", "jobs", "validate"), "/nonexistent/config.yaml")
    one_error(project.run("--jobs", "/nonexistent/jobs.yaml", "jobs", "validate"), "/nonexistent/jobs.yaml")


@pytest.mark.parametrize("path", ["/dev/zero"])
def test_jobs_file_over_the_size_cap_is_refused_without_reading_it(project, path):
    err = one_error(project.run("--jobs", path, "jobs", "validate", timeout=20), path, "limit")
    assert len(err.strip().splitlines()) == 1


def test_big_config_file_over_the_cap(project):
    config = project.write("config.yaml", "# pad\n" * 200_000, mode=0o600)
    project.write_jobs("jobs:\n  a:\n    prompt: hi\n")
    one_error(project.run("--config", str(config), "jobs", "validate"), "config.yaml", "limit")


def test_config_with_non_utf8_bytes(project):
    config = project.root / "config.yaml"
    config.write_bytes(b"timezone: \xff\xfe\n")
    config.chmod(0o600)
    project.write_jobs("jobs:\n  a:\n    prompt: hi\n")
    one_error(project.run("--config", str(config), "jobs", "validate"), "config.yaml", "not UTF-8")


def test_unreadable_jobs_file(project):
    project.write_jobs("jobs:\n  a:\n    prompt: hi\n")
    project.jobs_path.chmod(0)
    try:
        res = project.run("jobs", "validate")
    finally:
        project.jobs_path.chmod(0o600)
    if res.returncode == 0:
        pytest.skip("running as root: the file is still readable")
    one_error(res, "jobs.yaml", "cannot read")


def test_huge_template_output_is_a_clean_error_before_any_run(project):
    project.write_jobs(
        "jobs:\n  a:\n    prompt: \"{{ 'x' * 4000000000 }}\"\n  b:\n    prompt: '{{ 7 ** 100000000 }}'\n"
    )
    one_error(project.run("run-job", "a", timeout=30), "job a: prompt", "cap")
    one_error(project.run("run-job", "b", timeout=30), "job b: prompt", "bits")
    assert not project.has_store() or not _runs(project)


def test_templates_render_in_the_sandbox(project, fake):
    project.write_jobs("jobs:\n  a:\n    prompt: '{{ now.__class__.__mro__ }}'\n")
    one_error(project.run("run-job", "a"), "job a: prompt")
    assert fake.requests == []


def test_all_valid_after_fixes(project):
    project.write("p.md.j2", "Hello {{ vars.who }} on {{ today }}\n")
    project.write_jobs(
        """
        jobs:
          a:
            vars: {who: world}
            prompt: p.md.j2
            schedule: "@daily"
          b:
            schedule: "0 9 * * mon-fri"
            agent: false
            pre_run: echo hi
        """
    )
    res = project.run("jobs", "validate")
    assert res.returncode == 0 and "2 jobs, all valid" in res.stdout, res.stderr


# --- model ids with a slash ------------------------------------------------------------


def test_model_id_with_a_slash_goes_to_the_default_provider(project, fake):
    project.write_jobs("jobs:\n  a:\n    prompt: hi\n    model: meta-llama/Llama-3.1-8B-Instruct\n")
    fake.add(final("done"))
    assert project.run("jobs", "validate").returncode == 0
    res = project.run("run-job", "a")
    assert res.returncode == 0, res.stderr
    assert fake.requests[0]["body"]["model"] == "meta-llama/Llama-3.1-8B-Instruct"


def test_provider_slash_model_still_picks_the_provider(project, fake):
    config = project.write(
        "config.yaml",
        f"providers:\n  local:\n    base_url: {fake.base_url}\n    api_keys: [env:OPENAI_API_KEY]\n",
        mode=0o600,
    )
    project.write_jobs("jobs:\n  a:\n    prompt: hi\n    model: local/org/some-model\n")
    fake.add(final("done"))
    res = project.run("--config", str(config), "run-job", "a")
    assert res.returncode == 0, res.stderr
    assert fake.requests[0]["body"]["model"] == "org/some-model"


# --- unknown job names, run ids, cassettes, backend run ---------------------------------


def test_unknown_job_suggests_the_closest_names(project):
    body = "".join(f"  job-{i:05d}:\n    prompt: hi\n" for i in range(3000))
    project.write_jobs("jobs:\n" + body)
    err = one_error(project.run("run-job", "job-0001"), "unknown job 'job-0001'", "did you mean")
    assert len(err) < 300 and err.count("job-0") <= 4
    err = one_error(project.run("run-job", "q" * 100_000), "unknown job", "3000 jobs")
    assert len(err) < 400


def _runs(project) -> list[str]:
    with project.db() as db:
        return [r[0] for r in db.execute("SELECT id FROM runs ORDER BY id")]


@pytest.fixture
def two_runs(project, fake):
    project.write_jobs("jobs:\n  a:\n    prompt: hi\n")
    fake.add(final("one"), final("two"))
    for _ in range(2):
        assert project.run("run-job", "a").returncode == 0
    return _runs(project)


@pytest.mark.parametrize("bad", ["", "%", "_", "%%%%", "____", "x" * 100_000])
def test_run_id_wildcards_and_empty_ids_open_nothing(project, two_runs, bad):
    one_error(project.run("runs", "show", bad), "run")


def test_run_id_exact_prefix_and_ambiguous(project, two_runs):
    first, second = two_runs
    assert first in project.run("runs", "show", first).stdout
    assert second in project.run("runs", "show", second[:-2]).stdout
    shared = _common_prefix(first, second)
    if len(shared) >= 4:
        one_error(project.run("runs", "show", shared), "ambiguous")
    assert first in project.run("runs", "show", first[-6:]).stdout  # the random tail alone


def _common_prefix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def test_missing_cassette_is_exit_2(project, fake):
    project.write_jobs("jobs:\n  a:\n    prompt: hi\n")
    one_error(project.run("run-job", "a", "--replay", "nothere.yaml"), "nothere.yaml", "cassette not found")
    project.write("bad.yaml", "turns: 3\n")
    one_error(project.run("run-job", "a", "--replay", "bad.yaml"), "bad.yaml", "turns")
    assert fake.requests == []


def test_backend_run_keeps_the_argv_quoting(project):
    res = project.run("backend", "run", "local", "--", "sh", "-c", "echo a; echo b")
    assert res.returncode == 0 and res.stdout == "a\nb\n", res.stdout + res.stderr
    res = project.run("backend", "run", "local", "--", "printf", "%s|", "$HOME", "a  b")
    assert res.stdout.startswith("$HOME|a  b|"), res.stdout
    res = project.run("backend", "run", "local", "--", "echo one | tr o 0")  # one argument: a shell line
    assert res.stdout == "0ne\n"


# --- doctor -------------------------------------------------------------------------------


def _doctor(project, *args: str, env=None) -> tuple[int, dict[str, dict]]:
    res = project.run("doctor", "--json", *args, env=env)
    return res.returncode, {c["check"]: c for c in json.loads(res.stdout)}


def test_doctor_checks_the_provider(project, fake):
    project.write_jobs("jobs:\n  a:\n    prompt: hi\n")
    code, checks = _doctor(project)
    assert code == 0 and checks["provider default"]["ok"], checks
    assert fake.gets and fake.gets[0].endswith("/models")
    fake.models = ["something-else"]
    code, checks = _doctor(project)
    assert code == 1 and "not listed" in checks["provider default"]["detail"]
    fake.add(final("OK"))
    code, checks = _doctor(project, "--deep")
    assert code == 0 and "one-token" in checks["provider default"]["detail"]
    assert fake.requests[-1]["body"]["max_tokens"] == 1


def test_doctor_asks_azure_with_its_api_key_header_and_api_version(project, fake):
    base = fake.base_url.removesuffix("/v1") + "/openai/deployments/gpt-4o"
    config = project.write(
        "config.yaml",
        f"providers:\n  default:\n    base_url: {base}\n    api_version: '2024-10-21'\n"
        "    api_keys: [env:AZURE_TEST_KEY]\n",
    )
    project.write_jobs("jobs:\n  a:\n    prompt: hi\n")
    fake.add(final("OK"))
    env = project.env(AZURE_TEST_KEY="azure-key-0123456789")
    res = project.run("--config", str(config), "doctor", "--json", "--deep", env=env)
    checks = {c["check"]: c for c in json.loads(res.stdout)}
    assert checks["provider default"]["ok"], checks
    assert fake.gets[0] == "/openai/deployments/gpt-4o/models?api-version=2024-10-21"
    [request] = fake.requests
    assert request["path"] == "/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21"
    assert request["headers"]["api-key"] == "azure-key-0123456789" and "Authorization" not in request["headers"]


def test_doctor_unreachable_base_url_unset_key_and_unknown_provider(project, fake):
    config = project.write(
        "config.yaml",
        "providers:\n"
        "  default:\n    base_url: http://127.0.0.1:9/v1\n"
        f"  other:\n    base_url: {fake.base_url}\n    api_keys: [env:RUNNER_TEST_UNSET_KEY]\n",
        mode=0o600,
    )
    project.write_jobs("jobs:\n  a:\n    prompt: hi\n    model: [default, ghost]\n")
    res = project.run("--config", str(config), "doctor", "--json")
    checks = {c["check"]: c for c in json.loads(res.stdout)}
    assert res.returncode == 1
    assert not checks["provider default"]["ok"] and "unreachable" in checks["provider default"]["detail"]
    assert not checks["provider other"]["ok"] and "RUNNER_TEST_UNSET_KEY" in checks["provider other"]["detail"]
    assert not checks["jobs.yaml"]["ok"] and "unknown provider 'ghost'" in checks["jobs.yaml"]["detail"]
