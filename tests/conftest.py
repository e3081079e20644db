"""Shared fixtures: a temp RUNNER_HOME, a project folder with jobs.yaml, the fake model server,
and ways to call the CLI (in-process with click's CliRunner, or as a real subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from runner.testing import FakeOpenAI
from tests.receivers import Receiver

REPO = Path(__file__).resolve().parent.parent

# Nothing from the developer's own environment may leak into tests.
for _name in list(os.environ):
    if _name.startswith(("OPENAI_", "RUNNER_")) and not _name.startswith("RUNNER_TEST_"):
        del os.environ[_name]

# The real home of the person running pytest, captured before any test changes HOME. No test may
# run with it: a command that slips past the classifier then hits a throwaway folder instead.
REAL_HOME = os.path.realpath(os.path.expanduser("~"))


def assert_throwaway_home(env: Mapping[str, str]) -> None:
    """Fail when ``env`` (a test's, or a subprocess's) would use the real home folder."""
    home = env.get("HOME")
    assert home, "a test process must get an explicit throwaway HOME"
    assert os.path.realpath(home) != REAL_HOME, f"a test is using the real home folder {REAL_HOME}"


@pytest.fixture(autouse=True)
def throwaway_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test runs with HOME in a fresh temporary folder; the guard checks it is still there
    at the end (a test that put the real HOME back fails)."""
    home = tmp_path_factory.mktemp("userhome")
    monkeypatch.setenv("HOME", str(home))
    yield home
    assert_throwaway_home(os.environ)
    from runner.procs import is_subreaper

    # a test running a command in-process must not make pytest adopt (and a later run end) its
    # other processes (sshd, fake servers): only the real program becomes a subreaper
    assert not is_subreaper(), "this test made the pytest process a subreaper"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "home"
    monkeypatch.setenv("RUNNER_HOME", str(h))
    return h


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI().start()
    yield server
    server.stop()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A local HTTP receiver on 127.0.0.1 (webhook, Slack, Discord, Telegram formats)."""
    r = Receiver().start()
    yield r
    r.stop()


@dataclass
class Project:
    root: Path
    home: Path
    base_url: str

    @property
    def jobs_path(self) -> Path:
        return self.root / "jobs.yaml"

    def write_jobs(self, text: str) -> Path:
        self.jobs_path.write_text(textwrap.dedent(text))
        return self.jobs_path

    def write(self, rel: str, text: str, mode: int | None = None) -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        if mode is not None:
            path.chmod(mode)
        return path

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RUNNER_"))}
        env.update(
            RUNNER_HOME=str(self.home),
            RUNNER_JOBS=str(self.jobs_path),
            OPENAI_BASE_URL=self.base_url,
            OPENAI_API_KEY="sk-test-key-0123456789abcdef",
            PYTHONPATH=str(REPO),
        )
        env.update(extra)
        assert_throwaway_home(env)
        return env

    def start_job(self, name: str, fake: FakeOpenAI, timeout: float = 20) -> subprocess.Popen[str]:
        """Start `runner run-job NAME` in the background and return once it has asked the model."""
        proc = subprocess.Popen(
            [sys.executable, "-m", "runner", "run-job", name],
            env=self.env(),
            cwd=self.root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.time() + timeout
        while not fake.requests and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert fake.requests, "the worker never reached the model"
        return proc

    def cli(self, *args: str, env: dict[str, str] | None = None, input: str | None = None) -> Any:
        """Run the CLI in-process (click's CliRunner); returns the click Result."""
        from runner.cli import cli

        runner = CliRunner()
        env = env or self.env()
        assert_throwaway_home({**os.environ, **env})
        return runner.invoke(cli, list(args), env=env, input=input, catch_exceptions=False)

    def run(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 60, **kw: Any
    ) -> subprocess.CompletedProcess[str]:
        """Run ``python -m runner ARGS`` as a real subprocess."""
        env = env or self.env()
        assert_throwaway_home(env)
        return subprocess.run(
            [sys.executable, "-m", "runner", *args],
            env=env,
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=timeout,
            **kw,
        )


@pytest.fixture
def project(tmp_path: Path, home: Path, fake: FakeOpenAI) -> Project:
    root = tmp_path / "proj"
    root.mkdir()
    return Project(root=root, home=home, base_url=fake.base_url)


# -- PostgreSQL (issue 17): a real server of the session's own; a fresh database per test ----------
@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    from tests import pgserver

    why = pgserver.available()
    if why:
        pytest.skip(why)
    server = pgserver.PgServer.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server: Any) -> Iterator[str]:
    """A new PostgreSQL database with runner's migrations applied: its URL (``postgresql://...``)."""
    url = pg_server.fresh()
    yield url
    pg_server.drop(url)


@pytest.fixture
def pg_empty_url(pg_server: Any) -> Iterator[str]:
    """A new, empty PostgreSQL database (no tables): its URL."""
    url = pg_server.fresh(migrated=False)
    yield url
    pg_server.drop(url)


@pytest.fixture(params=["sqlite", "postgresql"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """What ``Store.open`` takes for a new, migrated store of each dialect (the store contract
    suite runs once per dialect): a runner.db in tmp_path, or a fresh PostgreSQL database's
    ``PgURL`` (skipped, with the reason, where PostgreSQL or psycopg is missing)."""
    from runner.store import Store
    from runner.store.dialect import PgURL

    if request.param == "sqlite":
        path = tmp_path / "runner.db"
        Store.open(path).close()
        return path
    return PgURL(request.getfixturevalue("pg_url"))


@pytest.fixture
def any_store(where: Any) -> Iterator[Any]:
    """An open store of each dialect (see ``where``)."""
    from runner.store import Store

    store = Store.open(where)
    yield store
    store.close()
