"""Unreadable jobs.yaml and config.yaml through the real `runner`: one line naming the file, exit 2.

Root reads every file whatever its mode, so as root the command runs as `nobody` (setpriv), in a
folder outside pytest's 0700 temp root; elsewhere a mode-0 file is enough."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, assert_throwaway_home

NOBODY = 65534


@pytest.fixture
def folder() -> Iterator[Path]:
    """A folder the command's user can enter (as root: owned by nobody, in /tmp)."""
    path = Path(tempfile.mkdtemp(prefix="runner-unreadable-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path)


def run_as_user(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    home = folder / "home"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(folder / "userhome"),
        "RUNNER_HOME": str(home),
        "PYTHONPATH": str(REPO),
    }
    assert_throwaway_home(env)
    argv = [sys.executable, "-m", "runner", *args]
    if os.getuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: cannot make a file unreadable")
        for path in [folder, *folder.rglob("*")]:
            os.chown(path, NOBODY, NOBODY)
        argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv]
    return subprocess.run(argv, env=env, cwd=folder, capture_output=True, text=True, timeout=60)


def assert_one_line(res: subprocess.CompletedProcess[str], *words: str) -> None:
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, res.stderr
    for word in words:
        assert word in lines[0], res.stderr


def test_unreadable_jobs_yaml(folder):
    jobs = folder / "jobs.yaml"
    jobs.write_text("jobs:\n  a:\n    prompt: hi\n")
    (folder / "home").mkdir(mode=0o700)
    (folder / "userhome").mkdir()
    jobs.chmod(0)
    # ./jobs.yaml rather than --jobs: click checks --jobs itself; runner's own read is the one tested
    res = run_as_user(folder, "jobs", "validate")
    assert_one_line(res, str(jobs), "cannot read", "Permission denied")


def test_unreadable_config_yaml(folder):
    (folder / "jobs.yaml").write_text("jobs:\n  a:\n    prompt: hi\n")
    (folder / "home").mkdir(mode=0o700)
    (folder / "userhome").mkdir()
    config = folder / "home" / "config.yaml"
    config.write_text("timezone: UTC\n")
    config.chmod(0)
    res = run_as_user(folder, "jobs", "list")
    assert_one_line(res, str(config), "cannot read", "Permission denied")
