"""jobs.yaml and config.yaml: strict parsing, every error at once, one-line messages, exit 2."""

import json
import os

import pytest

from runner.config.jobs import load_jobs
from runner.config.machine import load_config
from runner.errors import ConfigError, UsageError

GOOD = """
defaults:
  timeout: 5m
jobs:
  hello:
    prompt: "Say hi"
    schedule: "*/10 * * * *"
"""


def test_valid_file_and_defaults(project):
    path = project.write_jobs(GOOD)
    jf = load_jobs(path)
    job = jf.get("hello")
    assert job.spec.timeout == 300
    assert job.spec.max_iterations == 30
    assert job.workdir == project.root.resolve()


@pytest.mark.parametrize(
    "body,needle",
    [
        ("  hello:\n    prompt: hi\n    schedul: '* * * * *'\n", "job hello: schedul: unknown key"),
        ("  hello:\n    prompt: hi\n    schedule: '61 * * * *'\n", "job hello: schedule: invalid cron"),
        ("  hello:\n    prompt: hi\n    schedule: '0 0 31 2 *'\n", "can never fire"),
        ("  hello:\n    prompt: hi\n    timezone: Mars/Base\n", "job hello: timezone: unknown timezone"),
        ("  Hello_World:\n    prompt: hi\n", "job Hello_World: name: must match"),
        ("  hello:\n    prompt: jobs/missing.md.j2\n", "job hello: prompt: template file jobs/missing.md.j2 not found"),
        ("  hello:\n    prompt: hi\n    timeout: soon\n", "job hello: timeout: invalid duration"),
        ("  hello:\n    prompt: hi\n    backend: {type: docker}\n", "job hello: backend.docker.image: Field required"),
        ("  hello:\n    prompt: hi\n    backend: {type: kubernetes}\n", "job hello: backend"),
        (
            "  hello:\n    prompt: hi\n    backend: {type: docker, image: x, memory: lots}\n",
            "job hello: backend.docker.memory: must look like 512m",
        ),
        (
            "  hello:\n    prompt: hi\n    backend: {type: docker, image: x, mounts: ['nowhere:/m']}\n",
            "job hello: backend: docker backend: mount 'nowhere:/m'",
        ),
        (
            "  hello:\n    prompt: hi\n    backend: {type: ssh, host: h, ssh_options: [ControlPath=/x]}\n",
            "job hello: backend.ssh.ssh_options: may not set ControlPath",
        ),
        ("  hello:\n    prompt: hi\n    backend: 'ssh:h:0'\n", "job hello: backend: ssh backend: port: must be"),
        ("  hello:\n    prompt: hi\n    approvals: maybe\n", "job hello: approvals"),
        ("  hello:\n    prompt: hi\n    toolsets: [terminal, teleport]\n", "unknown toolset or tool 'teleport'"),
        ("  hello:\n    prompt: hi\n    deliver: [email]\n", "invalid sink 'email'"),
        ("  hello:\n    prompt: hi\n    retries: {attempts: 2, backof: 5m}\n", "retries.backof: unknown key"),
        ("  hello:\n    schedule: every 5m\n", "prompt: required"),
        ("  hello:\n    agent: false\n", "pre_run: required"),
    ],
)
def test_errors_name_file_job_field(project, body, needle):
    path = project.write_jobs("jobs:\n" + body)
    with pytest.raises(ConfigError) as info:
        load_jobs(path)
    text = str(info.value)
    assert needle in text
    assert all(line.startswith(f"{path}: ") for line in text.splitlines())


def test_all_errors_at_once(project):
    path = project.write_jobs(
        """
        jobs:
          a:
            prompt: hi
            schedule: "bad"
          b:
            prompt: hi
            colour: blue
          c:
            prompt: hi
        """
    )
    with pytest.raises(ConfigError) as info:
        load_jobs(path)
    assert len(info.value.problems) == 2


def test_backend_string_and_mapping_specs(project):
    path = project.write_jobs(
        """
        jobs:
          a: {prompt: hi, backend: "docker:python:3.12-slim"}
          b: {prompt: hi, backend: "ssh:deploy@example.org:2200"}
          c: {prompt: hi, backend: {type: docker, image: alpine, network: none, memory: 1g, cpus: 1}}
        """
    )
    jf = load_jobs(path)
    assert jf.get("a").spec.backend.image == "python:3.12-slim"
    b = jf.get("b").spec.backend
    assert (b.user, b.host, b.port) == ("deploy", "example.org", 2200)


def test_validate_command_exit_codes(project):
    project.write_jobs(GOOD)
    ok = project.run("jobs", "validate")
    assert ok.returncode == 0, ok.stderr
    project.write_jobs("jobs:\n  x:\n    prompt: hi\n    bogus: 1\n  y:\n    prompt: hi\n    schedule: nope\n")
    bad = project.run("jobs", "validate")
    assert bad.returncode == 2
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 2 and "Traceback" not in bad.stderr
    assert "job x: bogus: unknown key" in lines[0]


def test_validate_catches_template_syntax(project):
    project.write("jobs/t.md.j2", "Hello {{ vars.name ")
    project.write_jobs("jobs:\n  t:\n    prompt: jobs/t.md.j2\n")
    res = project.run("jobs", "validate")
    assert res.returncode == 2
    assert "template syntax error" in res.stderr


def test_invalid_yaml_is_one_line(project):
    project.write_jobs("jobs:\n  a: [unclosed\n")
    res = project.run("jobs", "list")
    assert res.returncode == 2
    assert "invalid YAML" in res.stderr and "Traceback" not in res.stderr


def test_jobs_list_json(project):
    project.write_jobs(GOOD + "  manual:\n    prompt: hi\n    backend: docker:alpine\n")
    res = project.cli("jobs", "list", "--json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    by = {r["name"]: r for r in rows}
    assert by["hello"]["next_fire"] and by["hello"]["backend"] == "local"
    assert by["manual"]["next_fire"] is None and by["manual"]["backend"] == "docker:alpine"


def test_jobs_found_via_flag_env_and_cwd(project, tmp_path):
    project.write_jobs(GOOD)
    env = project.env()
    del env["RUNNER_JOBS"]
    assert project.run("jobs", "list", env=env).returncode == 0  # ./jobs.yaml (cwd = project root)
    other = tmp_path / "elsewhere.yaml"
    other.write_text("jobs:\n  other:\n    prompt: hi\n")
    assert "other" in project.run("--jobs", str(other), "jobs", "list").stdout
    assert "other" in project.run("jobs", "list", env={**env, "RUNNER_JOBS": str(other)}).stdout


def test_jobs_next(project):
    project.write_jobs("jobs:\n  n:\n    prompt: hi\n    schedule: '30 2 * * *'\n    timezone: America/New_York\n")
    res = project.cli("jobs", "next", "n", "-n", "3", "--json")
    rows = json.loads(res.output)
    assert len(rows) == 3 and all("T02:30:00" in r["local"] for r in rows)


def test_config_env_fallback(tmp_path):
    cfg = load_config(
        tmp_path / "none.yaml",
        environ={
            "OPENAI_API_KEY": "k1",
            "OPENAI_API_KEYS": "k2, k3",
            "OPENAI_BASE_URL": "http://x/v1",
            "RUNNER_MODEL": "m",
        },
    )
    p = cfg.providers["default"]
    assert p.base_url == "http://x/v1" and p.model == "m"
    assert p.api_keys == ["env:OPENAI_API_KEY", "envlist:OPENAI_API_KEYS:0", "envlist:OPENAI_API_KEYS:1"]


def test_config_errors(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("providers:\n  default:\n    base_url: http://x\n    strategy: best\n")
    with pytest.raises(ConfigError, match="strategy"):
        load_config(path, environ={})


def test_config_with_literal_keys_must_be_private(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("providers:\n  default:\n    api_keys: [sk-literal-0123456789]\n")
    os.chmod(path, 0o644)
    with pytest.raises(UsageError, match="chmod 600"):
        load_config(path, environ={})
    os.chmod(path, 0o600)
    assert load_config(path, environ={}).providers["default"].api_keys


def test_home_created_private(project, fake):
    from runner.testing import final

    fake.add(final("done"))
    project.write_jobs("jobs:\n  a:\n    prompt: hi\n")
    res = project.run("run-job", "a")
    assert res.returncode == 0, res.stderr
    assert (project.home.stat().st_mode & 0o777) == 0o700
    if not project.database_url:  # --store postgresql: no runner.db file
        assert (os.stat(project.home / "runner.db").st_mode & 0o777) == 0o600


def test_jobs_list_summary_is_used_only_while_nothing_changed(project):
    project.write("jobs/t.md.j2", "hi")
    project.write_jobs("jobs:\n  a:\n    prompt: jobs/t.md.j2\n    schedule: '0 3 * * *'\n")
    first = project.run("jobs", "list", "--json")
    assert first.returncode == 0, first.stderr
    cached = list((project.home / "cache").glob("jobs-list-*.json"))
    assert len(cached) == 1
    again = project.run("jobs", "list", "--json")
    assert json.loads(again.stdout) == json.loads(first.stdout)
    (project.root / "jobs" / "t.md.j2").unlink()  # a file the validation checked disappears
    gone = project.run("jobs", "list")
    assert gone.returncode == 2 and "template file jobs/t.md.j2 not found" in gone.stderr
    project.write("jobs/t.md.j2", "hi")
    project.write_jobs("jobs:\n  a:\n    prompt: jobs/t.md.j2\n    schedule: '0 3 * * *'\n    colour: red\n")
    edited = project.run("jobs", "list")
    assert edited.returncode == 2 and "colour: unknown key" in edited.stderr
    project.home.joinpath("config.yaml").write_text("timezone: Europe/Berlin\n")
    project.write_jobs("jobs:\n  a:\n    prompt: jobs/t.md.j2\n    schedule: '0 3 * * *'\n")
    berlin = json.loads(project.run("jobs", "list", "--json").stdout)
    assert berlin[0]["timezone"] == "Europe/Berlin"
