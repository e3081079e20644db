"""Shared fixtures: a temp RUNNER_HOME, a project folder with jobs.yaml, the fake model server,
and ways to call the CLI (in-process with click's CliRunner, or as a real subprocess).

``pytest --store postgresql`` (or RUNNER_TEST_STORE=postgresql) runs the suite with every test's
store in a fresh, migrated PostgreSQL database of the session's own server: RUNNER_DATABASE_URL
is set for the test (and passed on by ``Project.env()`` to its subprocesses). Tests marked
``sqlite_only`` (about the SQLite file itself) are skipped then, with the reason."""

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


STORES = ("sqlite", "postgresql")
STORE_ENV = "RUNNER_TEST_STORE"
#: fixtures of tests that choose each store's dialect themselves (``--store`` does not apply)
OWN_STORES = frozenset({"pg_server", "pg_url", "pg_empty_url", "where", "any_store", "cluster", "site"})


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--store",
        choices=STORES,
        default=None,
        help="the store of every test's RUNNER_HOME: sqlite (the default; also $RUNNER_TEST_STORE) or "
        "postgresql (a fresh migrated database per test on the session's own PostgreSQL server)",
    )


def store_mode(config: pytest.Config) -> str:
    """``--store``, else $RUNNER_TEST_STORE, else sqlite."""
    mode = config.getoption("--store") or os.environ.get(STORE_ENV, "").strip() or "sqlite"
    if mode not in STORES:
        raise pytest.UsageError(f"{STORE_ENV}={mode!r}: use one of {', '.join(STORES)}")
    return str(mode)


def pytest_configure(config: pytest.Config) -> None:
    if store_mode(config) == "postgresql":
        from tests import pgserver

        why = pgserver.available()
        if why:  # not a skip: a pass on PostgreSQL that ran on SQLite would report green for nothing
            raise pytest.UsageError(f"--store postgresql: {why}")


#: ``-n auto`` (pyproject's addopts): worker processes per core. Most tests wait on subprocesses,
#: servers and sockets (the suite alone keeps about a third of two cores busy), so more workers
#: than cores; xdist's own PYTEST_XDIST_AUTO_NUM_WORKERS overrides.
WORKERS_PER_CORE = 2


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """How many processes ``-n auto`` starts: none (the tests run in pytest's own process) for a
    run of single tests named by node id (``pytest tests/x.py::test_y``); None leaves the count
    to xdist when PYTEST_XDIST_AUTO_NUM_WORKERS is set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    if config.args and all("::" in str(a) for a in config.args):
        return 0
    return max(2, (os.cpu_count() or 1) * WORKERS_PER_CORE)


def pytest_report_header(config: pytest.Config) -> str:
    return f"store: {store_mode(config)}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if store_mode(config) != "postgresql":
        return
    for item in items:
        marker = item.get_closest_marker("sqlite_only")
        if marker is not None:
            why = marker.args[0] if marker.args else "about the SQLite file"
            item.add_marker(pytest.mark.skip(reason=f"sqlite_only: {why}"))


@pytest.fixture(autouse=True)
def store_url(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str | None:
    """With ``--store postgresql``: this test's own migrated PostgreSQL database, named by
    RUNNER_DATABASE_URL for everything the test runs (its URL; None on SQLite). A test that picks
    its stores itself (it asks for ``pg_url``, ``where``, a ``cluster``, ..., or is marked
    ``own_store``) is left as written."""
    if store_mode(request.config) != "postgresql" or request.node.get_closest_marker("sqlite_only"):
        return None
    if OWN_STORES.intersection(request.fixturenames) or request.node.get_closest_marker("own_store"):
        return None
    url = str(request.getfixturevalue("pg_url"))
    monkeypatch.setenv("RUNNER_DATABASE_URL", url)
    return url


@pytest.fixture(autouse=True)
def throwaway_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test runs with HOME in a fresh temporary folder; the guard checks it is still there
    at the end (a test that put the real HOME back fails)."""
    home = tmp_path_factory.mktemp("userhome")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("RUNNER_LEDGER_STRICT", "1")  # a status change the ledger forbids raises (runner/store/ledger.py)
    # tables and colours read as they are written, whatever the shell that started pytest exports
    # (an xdist worker was seen with COLUMNS=80 LINES=24); tests/cli/test_terminal.py sets them itself
    for name in ("COLUMNS", "LINES", "FORCE_COLOR", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)
    yield home
    assert_throwaway_home(os.environ)
    from runner.host.procs import is_subreaper

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
    database_url: str | None = None  # --store postgresql: this test's database

    def db(self, **kw: Any) -> Any:
        """A connection to this project's store with sqlite3's shape: ``sqlite3.connect`` of the
        runner.db file (``kw`` passed on), or (``--store postgresql``) the test's PostgreSQL database."""
        return open_db(self.home, self.database_url, **kw)

    def open_store(self, *, migrate: bool = True) -> Any:
        """This project's ``Store`` (the runner.db file, or the test's PostgreSQL database)."""
        from runner.store import Store
        from runner.store.dialect import PgURL

        if self.database_url:
            return Store.open(PgURL(self.database_url), migrate=migrate)
        return Store.open(self.home / "runner.db", migrate=migrate)

    def store_bytes(self) -> bytes:
        """Everything the store holds, to search for leaked secrets: the runner.db file's bytes, or
        (``--store postgresql``) every value of every table of the test's database, as text."""
        if not self.database_url:
            return (self.home / "runner.db").read_bytes()
        with self.db() as db:
            tables = [
                r[0]
                for r in db.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
                )
            ]
            values = [str(v) for table in tables for row in db.execute(f'SELECT * FROM "{table}"') for v in row]
        return "\n".join(v for v in values if v != "None").encode()

    def has_store(self) -> bool:
        """Whether the store exists: the runner.db file; on PostgreSQL, whether anything was written
        (the test's database is made migrated, so "no file yet" means "no runs")."""
        if self.database_url:
            with self.db() as db:
                return bool(db.execute("SELECT COUNT(*) FROM runs").fetchone()[0])
        return (self.home / "runner.db").exists()

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
        # no inherited COLUMNS or colour switches: tables read as they are written (tests/cli/test_terminal.py sets them)
        skip = {"COLUMNS", "FORCE_COLOR", "NO_COLOR"}
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RUNNER_")) and k not in skip}
        env.update(
            RUNNER_HOME=str(self.home),
            RUNNER_JOBS=str(self.jobs_path),
            OPENAI_BASE_URL=self.base_url,
            OPENAI_API_KEY="sk-test-key-0123456789abcdef",
            PYTHONPATH=str(REPO),
            RUNNER_LEDGER_STRICT="1",
        )
        if self.database_url:
            env["RUNNER_DATABASE_URL"] = self.database_url
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
def project(tmp_path: Path, home: Path, fake: FakeOpenAI, store_url: str | None) -> Project:
    root = tmp_path / "proj"
    root.mkdir()
    return Project(root=root, home=home, base_url=fake.base_url, database_url=store_url)


class _PgDb:
    """A PostgreSQL store connection dressed as the sqlite3 connection a test reads with
    (``with``, ``commit``, ``row_factory``: rows are already indexable by name)."""

    def __init__(self, url: str):
        from runner.store.pg import PgConnection

        self._conn = PgConnection(url)
        self.row_factory: Any = None

    def execute(self, sql: str, params: Any = ()) -> Any:
        return self._conn.execute(sql, params)

    def executemany(self, sql: str, seq: Any) -> Any:
        return self._conn.executemany(sql, seq)

    def commit(self) -> None:
        return None  # autocommit

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> _PgDb:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_db(home: Path, database_url: str | None = None, **kw: Any) -> Any:
    """A connection to the store of ``home`` with sqlite3's shape: ``sqlite3.connect(home /
    "runner.db", **kw)``, or with a database URL (``--store postgresql``) the PostgreSQL store."""
    if database_url:
        return _PgDb(database_url)
    import sqlite3

    return sqlite3.connect(home / "runner.db", **kw)


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
