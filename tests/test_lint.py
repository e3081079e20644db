"""ruff and mypy are part of the test command: `pytest` fails when either does."""

import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.skipif(shutil.which("ruff") is None and sys.platform != "linux", reason="ruff not installed")
def test_ruff_clean():
    res = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "runner", "tests"], cwd=REPO, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.slow
def test_mypy_clean():
    res = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
