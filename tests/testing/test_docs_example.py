"""docs/testing.md's worked example, run as written: its files go to a throwaway project and a
separate pytest runs the operator's tests there (FakeOpenAI + `runner run-job`, and `--replay`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

DOC = REPO / "docs" / "testing.md"
BLOCK = re.compile(r"<!-- file: (?P<path>\S+) -->\n```[a-z]*\n(?P<body>.*?)^```$", re.S | re.M)


def doc_files() -> dict[str, str]:
    return {m["path"]: m["body"] for m in BLOCK.finditer(DOC.read_text(encoding="utf-8"))}


def test_the_doc_names_its_files():
    assert set(doc_files()) == {"jobs.yaml", "tests/test_readme_check.py", "cassettes/readme-check.yaml"}


def test_the_worked_example_passes_as_written(tmp_path: Path):
    project = tmp_path / "my-jobs"
    for rel, body in doc_files().items():
        path = project / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RUNNER_", "PYTEST_"))}
    env["PYTHONPATH"] = str(REPO)
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "2 passed" in res.stdout, res.stdout
    assert not (project / "home").exists()  # each test kept its RUNNER_HOME in its own tmp_path
