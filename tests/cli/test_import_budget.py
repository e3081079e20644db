"""What each start-up path must not import (issue 20, README "Start-up time").

Each test runs the real program, ``python -X importtime -m runner ...``, and reads the imported module names from the
importtime lines on stderr. Modules imported through ``importlib.import_module`` (runner's own
CLI and tool modules) have no line of their own, but every ``import`` statement inside them
does, so a heavy third-party package cannot hide."""

from __future__ import annotations

import subprocess
import sys

import pytest

from runner.testing import FakeOpenAI, final
from tests.conftest import Project

# never needed to list jobs, check a command or run a job that runs no command
HEAVY = {"apscheduler", "docker", "jinja2", "paramiko", "requests", "urllib3", "opentelemetry", "google"}
# the dashboard's stack (the web extra): only `runner web` and `runner serve --web` load it
WEB = {"starlette", "uvicorn", "prometheus_client", "markdown_it", "multipart", "python_multipart"}
HEAVY |= WEB
# the model client's libraries: only a command that calls the model may load them
MODEL_CLIENT = {"httpx", "httpcore", "openai", "h11", "anyio"}


def imported(project: Project, *args: str) -> set[str]:
    """Every module name ``python -X importtime -m runner ARGS`` imports (the command must succeed)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "runner", *args],
        env=project.env(),
        cwd=project.root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = {line.rpartition("|")[2].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    names.discard("package")  # the header line: "import time: self [us] | cumulative | imported package"
    assert "runner" in names, "no importtime lines: was -X importtime dropped?"
    return names


def loaded(names: set[str], packages: set[str]) -> list[str]:
    """The modules of ``names`` that are one of ``packages`` or inside one of them."""
    return sorted(n for n in names if n in packages or n.split(".")[0] in packages or n.rpartition(".")[0] in packages)


def under(names: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if n == prefixes or n.startswith(prefixes))


def fifty_jobs(project: Project) -> None:
    lines = ["jobs:\n"]
    for i in range(50):
        lines.append(f"  job-{i}:\n    prompt: 'do thing {i}'\n    schedule: '{i % 60} {i % 24} * * *'\n")
        lines.append("    timezone: Europe/Berlin\n    toolsets: [terminal, files]\n")
    project.jobs_path.write_text("".join(lines))


@pytest.mark.sqlite_only("the start-up imports of a SQLite installation (a PostgreSQL store loads psycopg)")
def test_jobs_list_imports_no_scheduler_library_and_warm_no_validation(project: Project) -> None:
    fifty_jobs(project)
    cold = imported(project, "jobs", "list")  # validates jobs.yaml, writes the listing cache
    assert loaded(cold, HEAVY | MODEL_CLIENT | {"asyncio"}) == []
    warm = imported(project, "jobs", "list")
    assert loaded(warm, HEAVY | MODEL_CLIENT | {"asyncio", "pydantic", "yaml", "ssl", "sqlite3"}) == []
    startup = {"runner.safety.startup"}  # every command's own first step (runner.entry), a few lines
    assert under(warm - startup, ("runner.safety.", "runner.run.", "runner.agent.", "runner.backends.")) == []


def test_approvals_check_loads_only_the_classifier(project: Project) -> None:
    names = imported(project, "approvals", "check", "--", "rm", "-rf", "build")
    assert "runner.safety.shell.classify" in names
    assert loaded(names, HEAVY | MODEL_CLIENT | {"pydantic", "yaml", "sqlite3", "ssl"}) == []
    assert under(names, ("runner.config.", "runner.run.", "runner.agent.", "runner.backends")) == []


@pytest.mark.slow
def test_one_turn_run_job_imports_nothing_it_does_not_use(project: Project, fake: FakeOpenAI) -> None:
    """A plain prompt needs no Jinja2; a run that runs no command needs no shell classifier; a
    local backend needs no Docker SDK; nothing needs a scheduler library."""
    project.write_jobs("jobs:\n  one:\n    prompt: Say ok\n    toolsets: [terminal, files]\n")
    fake.default = final("ok")
    names = imported(project, "run-job", "one")
    assert len(fake.requests) == 1
    assert loaded(names, HEAVY) == []
    assert under(names, ("runner.safety.shell", "runner.serve", "runner.kanban.", "runner.agent.otel")) == []
    assert {"runner.backends.docker", "runner.backends.ssh"}.isdisjoint(names)  # the implementations, not the specs
    assert "html.parser" not in names  # web_fetch's parser loads with its first page


def test_the_helper_sees_modules_loaded_through_import_module(project: Project) -> None:
    """The check would be blind if runner's own lazily imported modules hid their imports."""
    fifty_jobs(project)
    names = imported(project, "jobs", "list", "--json")
    assert "zoneinfo" in names  # imported by runner.config.schedules, itself loaded from a command body


def test_a_replayed_one_turn_run_loads_no_logging_thread_pool_or_metadata_scan(project: Project, fake: FakeOpenAI) -> None:
    """The same turn from a cassette (no SDK, which loads logging itself): the stdlib's logging and
    concurrent.futures (~10 ms together) wait for what needs them (a failed skill review, a turn
    of several read-only calls)."""
    project.write_jobs("jobs:\n  one:\n    prompt: Say ok\n    toolsets: [terminal, files]\n")
    fake.default = final("ok")
    cassette = project.root / "one.cassette"
    recorded = project.run("run-job", "one", "--record", str(cassette))
    assert recorded.returncode == 0, recorded.stderr
    names = imported(project, "run-job", "one", "--replay", str(cassette))
    assert loaded(names, MODEL_CLIENT) == []
    assert {"logging", "concurrent.futures"}.isdisjoint(names)
    assert "importlib.metadata" not in names  # no pydantic plugin scan (socket: the sandbox's channel)
