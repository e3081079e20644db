"""Which config.yaml a command reads, through the real program: ``--config``, else
``$RUNNER_CONFIG``, else the config.yaml beside jobs.yaml, else ``RUNNER_HOME/config.yaml``;
``runner doctor`` names the file and why; kanban workers and ``runner web`` read the same file.
Each case is a real ``python -m runner`` subprocess."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys

from runner.testing import call, final
from tests.kanban_util import FAST, dispatcher, status_of, wait_for

JOBS = """\
jobs:
  ask:
    prompt: say hi
    toolsets: []
"""


def _config(project, where, model):
    """A config.yaml at ``where`` whose provider is the fake model server, asking for ``model``."""
    where.parent.mkdir(parents=True, exist_ok=True)
    where.write_text(
        "providers:\n"
        "  default:\n"
        f"    base_url: {project.base_url}\n"
        f"    model: {model}\n"
        "    api_keys: [env:OPENAI_API_KEY]\n"
    )
    return where


def _doctor_config_line(project, *args, **env):
    res = project.run(*args, "doctor", env=project.env(**env))
    lines = [line for line in res.stdout.splitlines() if re.match(r"^\S+\s+config\s", line)]
    assert len(lines) == 1, res.stdout + res.stderr
    return lines[0]


def _model_asked(project, fake, *args, **env):
    fake.add(final("hi"))
    res = project.run(*args, "run-job", "ask", env=project.env(**env))
    assert res.returncode == 0, res.stderr
    return fake.requests[-1]["body"]["model"]


def test_the_config_beside_jobs_yaml_is_read_before_runner_homes(project, fake):
    project.write_jobs(JOBS)
    _config(project, project.home / "config.yaml", "home-model")
    assert _model_asked(project, fake) == "home-model"
    line = _doctor_config_line(project)
    assert line.startswith("ok") and f"{project.home / 'config.yaml'} (in RUNNER_HOME)" in line

    beside = _config(project, project.root / "config.yaml", "project-model")
    assert _model_asked(project, fake) == "project-model"
    assert f"{beside} (beside jobs.yaml)" in _doctor_config_line(project)


def test_runner_config_and_then_the_option_override_the_project(project, fake, tmp_path):
    project.write_jobs(JOBS)
    _config(project, project.root / "config.yaml", "project-model")
    _config(project, project.home / "config.yaml", "home-model")
    named = _config(project, tmp_path / "etc" / "named.yaml", "env-model")
    given = _config(project, tmp_path / "etc" / "given.yaml", "option-model")

    assert _model_asked(project, fake, RUNNER_CONFIG=str(named)) == "env-model"
    assert f"{named} (from RUNNER_CONFIG)" in _doctor_config_line(project, RUNNER_CONFIG=str(named))

    assert _model_asked(project, fake, "--config", str(given), RUNNER_CONFIG=str(named)) == "option-model"
    line = _doctor_config_line(project, "--config", str(given), RUNNER_CONFIG=str(named))
    assert f"{given} (given with --config)" in line


def test_no_config_anywhere_runs_on_the_environment_and_says_so(project):
    project.write_jobs(JOBS)
    line = _doctor_config_line(project)
    assert line.startswith("ok")
    assert f"{project.home / 'config.yaml'} (absent: env defaults; none beside {project.jobs_path} either)" in line


def test_a_named_config_that_is_missing_is_one_line_exit_2(project, tmp_path):
    project.write_jobs(JOBS)
    _config(project, project.root / "config.yaml", "project-model")  # never a fallback for a named file
    missing = tmp_path / "nowhere.yaml"
    res = project.run("run-job", "ask", env=project.env(RUNNER_CONFIG=str(missing)))
    assert res.returncode == 2 and res.stderr == f"error: {missing}: config file not found (from RUNNER_CONFIG)\n"
    res = project.run("--config", str(missing), "run-job", "ask")
    assert res.returncode == 2 and res.stderr == f"error: {missing}: config file not found (given with --config)\n"


def test_a_project_config_with_a_mistake_is_named_by_its_path(project):
    project.write_jobs(JOBS)
    bad = project.root / "config.yaml"
    bad.write_text("providers: [not, a, mapping]\n")
    res = project.run("jobs", "list")
    assert res.returncode == 2 and str(bad) in res.stderr and "Traceback" not in res.stderr


def test_the_start_up_secret_scan_reads_the_same_config(tmp_path):
    """``runner.host.secrets`` scans config.yaml for ``env:NAME`` before click starts (those
    variables leave the environment block): the file it scans is the one the command reads."""
    from runner.host.secrets import config_refs

    proj, home = tmp_path / "proj", tmp_path / "home"
    proj.mkdir()
    (home).mkdir()
    (home / "config.yaml").write_text("providers: {default: {api_keys: [env:HOME_NAME]}}\n")
    env = {"RUNNER_HOME": str(home), "RUNNER_JOBS": str(proj / "jobs.yaml")}
    assert config_refs(["run-job", "x"], env) == {"HOME_NAME"}
    (proj / "config.yaml").write_text("providers: {default: {api_keys: [env:PROJECT_NAME]}}\n")
    assert config_refs(["run-job", "x"], env) == {"PROJECT_NAME"}
    named = tmp_path / "named.yaml"
    named.write_text("smtp: {password: env:NAMED_NAME}\n")
    assert config_refs(["run-job", "x"], {**env, "RUNNER_CONFIG": str(named)}) == {"NAMED_NAME"}
    given = tmp_path / "given.yaml"
    given.write_text("smtp: {password: envlist:GIVEN_NAME}\n")
    assert config_refs(["--config", str(given), "run-job", "x"], {**env, "RUNNER_CONFIG": str(named)}) == {"GIVEN_NAME"}
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.yaml").write_text("x: env:OTHER_NAME\n")
    assert config_refs(["--jobs", str(other / "jobs.yaml"), "run-job", "x"], env) == {"OTHER_NAME"}


def test_kanban_workers_and_the_dashboard_read_the_project_config(project, fake):
    """The dispatcher's workers ask the project config's provider; `runner web` binds where the
    project config's ``web.bind`` says."""
    project.write_jobs("jobs:\n  agent:\n    prompt: Work on your kanban task.\n    toolsets: [kanban]\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    beside = _config(project, project.root / "config.yaml", "project-model")
    fast = ", ".join(f"{k}: {v}" for k, v in FAST.items())
    beside.write_text(beside.read_text() + f"kanban: {{{fast}}}\nweb: {{bind: '127.0.0.1:{port}'}}\n")
    _config(project, project.home / "config.yaml", "home-model")

    res = project.run("kanban", "add", "say hi", "--job", "agent")
    assert res.returncode == 0, res.stderr
    task = int(res.stdout.strip())
    fake.add(call("kanban_complete", {"result": "hi"}), final("done"))
    with dispatcher(project):
        wait_for(lambda: status_of(project, task) == "done", timeout=40, what="the task done")
    assert {r["body"]["model"] for r in fake.requests} == {"project-model"}

    web = subprocess.Popen(
        [sys.executable, "-m", "runner", "web"],
        env=project.env(),
        cwd=project.root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert web.stdout is not None
        line = web.stdout.readline()
        assert line.startswith(f"runner web: http://127.0.0.1:{port}/"), line
    finally:
        web.send_signal(signal.SIGTERM)
        web.communicate(timeout=30)
