"""The terminal: coloured statuses (``NO_COLOR``, ``FORCE_COLOR``, none in a pipe, none in
``--json``), tables fitted to the width, run-job's failure line with the script's output tail,
and ``runner completion`` driven through a real bash. All through the real ``runner``."""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO, Project

JOBS = """\
jobs:
  good:
    agent: false
    pre_run: "echo fine"
  bad:
    agent: false
    pre_run: "echo partial; echo first >&2; echo second >&2; exit 3"
  quiet:
    agent: false
    pre_run: "echo only stdout a; echo only stdout b; exit 4"
  loud:
    agent: false
    pre_run: "for i in $(seq 1 15); do echo line $i >&2; done; exit 5"
"""
ESC = "\x1b["
GREEN, RED = "\x1b[32m", "\x1b[31m"


def ran(project: Project) -> tuple[str, str]:
    project.write_jobs(JOBS)
    good = project.run("run-job", "good", "--json")
    assert good.returncode == 0, good.stderr
    assert project.run("run-job", "bad").returncode == 1
    return json.loads(good.stdout)["id"], project.jobs_path.read_text()


def on_a_tty(project: Project, *args: str, **env: str) -> str:
    """What ``runner ARGS`` prints on a real terminal (a pty), 200 columns wide."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", *args],
        env=project.env(COLUMNS="200", **env),
        cwd=project.root,
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=subprocess.DEVNULL,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # the pty closed: the program ended
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    assert proc.wait(timeout=60) == 0
    return b"".join(chunks).decode()


def test_statuses_are_coloured_on_a_terminal_and_nowhere_else(project: Project) -> None:
    ran(project)
    piped = project.run("runs", "list")
    assert ESC not in piped.stdout and "succeeded" in piped.stdout and "failed" in piped.stdout
    forced = project.run("runs", "list", env=project.env(FORCE_COLOR="1")).stdout
    assert f"{GREEN}succeeded" in forced and f"{RED}" in forced
    assert ESC not in project.run("runs", "list", env=project.env(FORCE_COLOR="1", NO_COLOR="1")).stdout
    as_json = project.run("runs", "list", "--json", env=project.env(FORCE_COLOR="1")).stdout
    assert ESC not in as_json and json.loads(as_json)
    tty = on_a_tty(project, "runs", "list")
    assert f"{GREEN}succeeded" in tty and f"{RED}" in tty
    assert ESC not in on_a_tty(project, "runs", "list", NO_COLOR="1")
    assert f"{GREEN}succeeded" in on_a_tty(project, "jobs", "list")  # the LAST column too
    # the padding stays outside the colour: columns line up as in the plain table
    plain = [line for line in piped.stdout.splitlines() if "succeeded" in line][0]
    coloured = [line for line in forced.splitlines() if "succeeded" in line][0]
    assert coloured.replace(GREEN, "").replace("\x1b[0m", "") == plain
    failed = project.run("run-job", "bad", env=project.env(FORCE_COLOR="1")).stderr
    assert f"{RED}" in failed and ": failed" not in failed  # the status word itself is red


def test_tables_fit_the_terminal_width(project: Project) -> None:
    run_id, _ = ran(project)
    full = project.run("runs", "list").stdout.splitlines()  # a pipe without COLUMNS: never cut
    assert full[0].split() == ["RUN", "JOB", "TRIGGER", "STATUS", "REASON", "STARTED", "TOOK", "TURNS", "TOKENS", "COST$", "DELIVERY"]
    assert max(map(len, full)) > 100
    for columns in (100, 72, 50):
        lines = project.run("runs", "list", env=project.env(COLUMNS=str(columns))).stdout.splitlines()
        assert max(map(len, lines)) <= columns, (columns, lines)
        head = lines[0].split()
        assert head[:2] == ["RUN", "JOB"] and "STATUS" in head  # the id, the job and the status stay
        assert any(line.startswith(run_id) for line in lines[1:])  # ids are never cut
        assert any("succeeded" in line for line in lines) and any("failed" in line for line in lines)
    narrow = project.run("runs", "list", env=project.env(COLUMNS="72")).stdout
    assert "…" in narrow or len(narrow.splitlines()[0].split()) < len(full[0].split())
    wide = project.run("runs", "list", env=project.env(COLUMNS="300")).stdout
    assert wide == project.run("runs", "list").stdout


def test_run_job_failure_line_ends_with_the_scripts_output(project: Project) -> None:
    ran(project)
    bad = project.run("run-job", "bad")
    assert bad.returncode == 1
    head, *tail = bad.stderr.strip().splitlines()
    assert head.startswith("run ") and head.endswith(": failed (pre_run): pre_run exited 3; stderr, last lines:")
    assert tail == ["  first", "  second"]
    quiet = project.run("run-job", "quiet").stderr.strip().splitlines()
    assert quiet[0].endswith("pre_run exited 4; stdout, last lines:")  # no stderr: stdout's end
    assert quiet[1:] == ["  only stdout a", "  only stdout b"]
    loud = project.run("run-job", "loud").stderr.strip().splitlines()
    assert loud[1:] == ["  ...", *[f"  line {i}" for i in range(6, 16)]]  # the last 10 lines


def complete(project: Project, *words: str) -> list[str]:
    """The words bash offers after ``runner WORDS`` (the last word is the one being completed),
    with the script ``runner completion bash`` printed sourced into a real bash."""
    bin_dir = project.root / "bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "runner"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m runner "$@"\n')
    shim.chmod(0o755)
    script = (
        'eval "$(runner completion bash)"\n'
        'COMP_WORDS=(runner "$@"); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))\n'
        "_runner_completion runner\n"
        "printf '%s\\n' \"${COMPREPLY[@]}\"\n"
    )
    env = project.env(PATH=f"{bin_dir}:{os.environ['PATH']}")
    res = subprocess.run(
        ["bash", "-c", script, "bash", *words], env=env, cwd=project.root, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    return [w for w in res.stdout.splitlines() if w]


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completion_of_commands_job_names_and_run_ids(project: Project) -> None:
    run_id, _ = ran(project)
    assert complete(project, "ru") == ["run-job", "runs"]
    assert complete(project, "run-job", "") == ["bad", "good", "loud", "quiet"]
    assert complete(project, "run-job", "g") == ["good"]
    assert complete(project, "runs", "list", "--job", "b") == ["bad"]
    assert complete(project, "jobs", "pause", "q") == ["quiet"]
    ids = complete(project, "runs", "show", "")
    assert len(ids) == 2 and run_id in ids
    assert complete(project, "runs", "show", run_id[:-2]) == [run_id]
    assert complete(project, "completion", "") == ["bash", "zsh", "fish"]
    project.jobs_path.write_text("jobs: [broken")  # a broken jobs.yaml completes nothing, quietly
    assert complete(project, "run-job", "") == []


def test_completion_scripts_for_each_shell(project: Project) -> None:
    for shell, marker in (("bash", "complete -o nosort -F"), ("zsh", "#compdef runner"), ("fish", "complete --no-files --command runner")):
        res = project.run("completion", shell)
        assert res.returncode == 0 and marker in res.stdout and "_RUNNER_COMPLETE" in res.stdout, (shell, res.stdout)
    wrong = project.run("completion", "tcsh")
    assert wrong.returncode == 2 and "tcsh" in wrong.stderr and "Traceback" not in wrong.stderr
    assert (REPO / "docs" / "commands.md").read_text().count("runner completion") >= 2
