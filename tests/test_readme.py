"""The README's first screen works as written, from nothing.

The bash blocks between ``<!-- first-screen`` and ``<!-- end first-screen -->`` in README.md run
in order in a fresh folder with a throwaway HOME (so ``~/.runner`` is new): ``git clone`` of this
checkout (the README's URL replaced by a path to it: the clone holds its committed HEAD),
a new venv, ``pip install`` through this machine's pip configuration (its index or mirror, as
CI's own install), the offline run, the live run (the model: the fake OpenAI server, named by
``~/.runner/config.yaml``, which also picks a free port for the dashboard), then ``runner web``,
asked for its overview page and stopped by its PID. The ``sudo apt-get install`` line is not run:
its packages must be installed already. Also: what ``runner init`` prints as next steps is what
the README says under "Your own project".
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from runner.testing import final
from tests.conftest import REPO, assert_throwaway_home

README = REPO / "README.md"
CLONE_URL = "https://github.com/runner/runner.git"


def first_screen() -> list[str]:
    """The command lines of the bash blocks inside the first-screen markers."""
    text = README.read_text()
    start = text.index("<!-- first-screen")
    end = text.index("<!-- end first-screen -->", start)
    blocks = re.findall(r"^```bash\n(.*?)^```", text[start:end], flags=re.S | re.M)
    assert blocks, "README.md: no ```bash block between the first-screen markers"
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def command_of(line: str) -> str:
    """The line without its trailing comment."""
    return re.sub(r"\s+#\s.*$", "", line).strip()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _clean_env(home: Path) -> dict[str, str]:
    """The environment of a person's new shell: no venv of ours on PATH, no runner or OpenAI
    variables, nothing pointing Python at this checkout."""
    ours = str(Path(sys.prefix) / "bin")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "RUNNER_", "PYTHON", "PYTEST")) and k not in ("VIRTUAL_ENV", "COV_CORE_SOURCE")
    }
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and p != ours)
    env["HOME"] = str(home)
    assert_throwaway_home(env)
    return env


def test_the_first_screen_parses_into_the_promised_steps():
    lines = [command_of(line) for line in first_screen()]
    assert lines[0].startswith("sudo apt-get install")
    steps = lines[1:]
    assert steps[0].startswith("git clone ") and CLONE_URL in steps[0]
    assert steps[1].startswith("python3 -m venv .venv")
    assert steps[2].startswith("pip install -e ")
    assert "--replay" in steps[3] and steps[4].startswith("OPENAI_API_KEY=")
    assert steps[-1] == "runner web"


def test_runner_init_prints_what_the_readme_says(tmp_path):
    """`runner init`'s next steps are the README's "Your own project" commands."""
    env = _clean_env(tmp_path / "userhome")
    env["RUNNER_HOME"] = str(tmp_path / "state")
    res = subprocess.run(
        [sys.executable, "-m", "runner", "init", "my-jobs"],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    steps = res.stdout.split("next:\n", 1)[1].splitlines()
    text = README.read_text()
    own = text[text.index("## Your own project") :]
    block = re.search(r"^```\n(.*?)^```", own, flags=re.S | re.M)
    assert block is not None
    readme_steps = [command_of(line) for line in block.group(1).splitlines()]
    assert readme_steps[0] == "runner init my-jobs && cd my-jobs"
    for step in steps:
        assert command_of(step.strip()) in readme_steps[1:] + ["cd my-jobs"], (step, readme_steps)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_first_screen_runs_as_written(tmp_path, fake):
    lines = first_screen()
    apt, script = lines[0], [command_of(line) for line in lines[1:]]

    packages = [w for w in shlex.split(command_of(apt))[3:] if not w.startswith("-")]
    if shutil.which("dpkg-query") is not None:
        missing = [
            p
            for p in packages
            if subprocess.run(["dpkg-query", "-W", "-f=${Status}", p], capture_output=True, text=True).stdout
            != "install ok installed"
        ]
        assert not missing, f"the README's apt-get line names packages this machine lacks: {missing}"
    assert all(shutil.which(tool) for tool in ("git", "bwrap")), "git and bubblewrap are needed"

    home = tmp_path / "userhome"
    work = tmp_path / "fresh"
    work.mkdir()
    port = _free_port()
    state = home / ".runner"
    state.mkdir(parents=True, mode=0o700)
    (state / "config.yaml").write_text(
        f"providers:\n  default:\n    base_url: {fake.base_url}\n    model: gpt-4.1-mini\n"
        f"web:\n  bind: 127.0.0.1:{port}\n"
    )
    fake.add(final("Live report: nothing happened, and that is fine."))

    assert script[0].count(CLONE_URL) == 1
    origin = tmp_path / "origin" / "runner.git"  # the clone's folder is named after the URL's last part
    origin.parent.mkdir()
    if (REPO / ".git").exists():
        origin.symlink_to(REPO)
    else:  # a checkout without its git folder (an unpacked archive): a repository of its files
        shutil.copytree(REPO, origin, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", ".venv", ".*_cache"))
        git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.invalid"]
        for step in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "snapshot"]):
            subprocess.run([*git, *step], cwd=origin, check=True, capture_output=True)
    script[0] = script[0].replace(CLONE_URL, shlex.quote(str(origin)))
    web = script.pop()
    body = "set -e\n" + "".join(f"printf '\\n=== %s\\n' {shlex.quote(cmd)}\n{cmd}\n" for cmd in script)
    env = _clean_env(home)
    started = time.monotonic()
    res = subprocess.run(
        ["bash", "-c", body], cwd=work, env=env, capture_output=True, text=True, timeout=840, stdin=subprocess.DEVNULL
    )
    took = time.monotonic() - started
    assert res.returncode == 0, f"{res.stdout[-4000:]}\n--- stderr ---\n{res.stderr[-4000:]}"

    clone = work / "runner"
    assert (clone / ".venv" / "bin" / "runner").exists()
    runs = res.stdout.split("=== runner run-job nightly-report --replay", 1)[1]
    offline, live = runs.split("=== OPENAI_API_KEY=", 1)
    assert "## Summary" in offline and "replayed cassette" in offline, offline
    assert "Live report: nothing happened" in live, live
    assert len(re.findall(r"^run \S+: succeeded$", res.stderr, flags=re.M)) == 2, res.stderr
    assert len(fake.requests) == 1, "the offline run asked the model"  # the live run's one turn
    assert fake.keys_used() == ["sk-..."]
    assert len(list((state / "outputs" / "nightly-report").iterdir())) == 2

    server = subprocess.Popen(
        ["bash", "-c", f". .venv/bin/activate && exec {web}"],
        cwd=clone,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert server.stdout is not None
        first = server.stdout.readline()
        assert first.startswith(f"runner web: http://127.0.0.1:{port}/"), first + (server.stderr.read() if server.poll() is not None else "")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as page:
            assert page.status == 200
            assert b"nightly-report" in page.read()
    finally:
        os.kill(server.pid, signal.SIGTERM)
        server.communicate(timeout=30)
    print(f"first screen: {took:.0f} s from git clone to the live run")
