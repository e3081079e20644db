"""The distributed set-up as real processes: a ``redis-server`` per test session (``redis_url``),
a store shared by every process, and "machines" (``Cluster``): each serve and each ``runner worker``
with its own RUNNER_HOME and its own copy of the project folder (no shared filesystem but the
store), against the fake model server."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from runner.testing import FakeOpenAI
from tests.conftest import REPO, assert_throwaway_home
from tests.servehelp import wait_for

REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Redis:
    """A real ``redis-server`` on a free port in a temp folder, without persistence."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="runner-redis-"))
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> Redis:
        self.proc = subprocess.Popen(
            [
                REDIS,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.dir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for(self._up, timeout=10, what="redis-server to listen")
        return self

    def _up(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def flush(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
            s.sendall(b"FLUSHALL\r\n")
            s.recv(16)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[Redis]:
    if not os.path.exists(REDIS):
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    server = Redis().start()
    yield server
    server.stop()
    shutil.rmtree(server.dir, ignore_errors=True)


@pytest.fixture
def redis_url(redis_server: Redis) -> str:
    """The session's Redis, emptied for this test."""
    if redis_server.proc is None or redis_server.proc.poll() is not None:
        redis_server.start()
    redis_server.flush()
    return redis_server.url


CONFIG = """
serve:
  max_parallel: {max_parallel}
  heartbeat_s: 0.5
  kill_grace: {kill_grace}
  shutdown_grace: 3
  lease_s: {lease_s}
executor:
  type: celery
  broker: {broker}
  heartbeat_s: 0.5
  lost_after_s: {lost_after_s}
  resend_s: {resend_s}
"""


@dataclass
class Machine:
    """One "machine": a RUNNER_HOME and a project folder of its own, and the process it runs."""

    name: str
    root: Path
    home: Path
    env: dict[str, str]
    proc: subprocess.Popen[str] | None = None
    log_path: Path | None = None
    python: str = sys.executable  # a benchmark runs main before's checkout with its Python

    @property
    def jobs_path(self) -> Path:
        return self.root / "jobs.yaml"

    def start(self, *args: str) -> Machine:
        self.log_path = self.home.parent / f"{self.name}.log"
        log = open(self.log_path, "a")  # noqa: SIM115 - the child holds it; closed when it is
        self.proc = subprocess.Popen(
            [self.python, "-m", "runner", *args],
            env=self.env,
            cwd=self.root,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        log.close()
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``python -m runner ARGS`` on this machine (its environment and project folder)."""
        return subprocess.run(
            [self.python, "-m", "runner", *args],
            env=self.env,
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def kill_tree(self) -> None:
        """SIGKILL the process and everything under it: the machine is gone."""
        from runner.host.procs import ProcessTree

        if self.proc is None:
            return
        tree = ProcessTree(self.proc.pid)
        tree.signal(signal.SIGSTOP)
        tree.signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout: float = 20) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill_tree()


@dataclass
class Cluster:
    """A shared store, the project folder's source, and the machines made from it."""

    tmp: Path
    fake: FakeOpenAI
    broker: str
    store_url: str
    machines: list[Machine] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    _pg: Any = None  # the test's own connection to a PostgreSQL store
    repo: Path = REPO  # the checkout the machines run (a benchmark's main before: another one)
    python: str = sys.executable

    @property
    def source(self) -> Path:
        return self.tmp / "source"

    def write_jobs(self, text: str) -> None:
        self.source.mkdir(parents=True, exist_ok=True)
        (self.source / "jobs.yaml").write_text(textwrap.dedent(text))

    def machine(self, name: str, *, extra: str = "", **config: Any) -> Machine:
        """A new machine with a copy of the project folder as it is now; ``extra``: more config.yaml."""
        base = self.tmp / name
        root, home = base / "proj", base / "home"
        shutil.copytree(self.source, root)
        home.mkdir(parents=True)
        values = {
            "max_parallel": 32,
            "kill_grace": 0.5,
            "lease_s": 3,
            "lost_after_s": 3,
            "resend_s": 5,
            **self.config,
            **config,
        }
        text = textwrap.dedent(CONFIG.format(broker=self.broker, **values)) + textwrap.dedent(extra)
        (home / "config.yaml").write_text(text)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RUNNER_"))}
        env.update(
            RUNNER_HOME=str(home),
            RUNNER_JOBS=str(root / "jobs.yaml"),
            RUNNER_DATABASE_URL=self.store_url,
            OPENAI_BASE_URL=self.fake.base_url,
            OPENAI_API_KEY="sk-test-key-0123456789abcdef",
            PYTHONPATH=str(self.repo),
        )
        assert_throwaway_home(env)
        m = Machine(name, root, home, env, python=self.python)
        self.machines.append(m)
        return m

    def serve(self, name: str = "serve", **config: Any) -> Machine:
        return self.machine(name, **config).start("serve")

    def worker(self, name: str, *, concurrency: int = 4, queues: str = "runner", **config: Any) -> Machine:
        return self.machine(name, **config).start(
            "worker", "--hostname", f"{name}@test", "--concurrency", str(concurrency), "--queues", queues
        )

    def rows(
        self, sql: str = "SELECT * FROM runs ORDER BY job, slot, attempt", params: tuple[Any, ...] = ()
    ) -> list[dict[str, Any]]:
        if self.store_url.startswith("postgresql"):
            return self._pg_rows(sql, params)
        path = self.store_url.removeprefix("sqlite://")
        if not os.path.exists(path):
            return []
        db = sqlite3.connect(path, timeout=30)
        db.row_factory = sqlite3.Row
        try:
            return [dict(r) for r in db.execute(sql, params)]
        except sqlite3.OperationalError:
            return []
        finally:
            db.close()

    def _pg_rows(self, sql: str, params: tuple[Any, ...]) -> list[dict[str, Any]]:
        from runner.store import Store
        from runner.store.dialect import PgURL

        if self._pg is None:
            self._pg = Store.open(PgURL(self.store_url), migrate=False)
        return self._pg.query(sql, params)

    def wait_ready(self, m: Machine, text: str, timeout: float = 30) -> None:
        wait_for(
            lambda: text in m.log() or (m.proc is not None and m.proc.poll() is not None),
            timeout=timeout,
            what=f"{m.name}: {text!r}",
        )
        assert m.proc is not None and m.proc.poll() is None, f"{m.name} exited:\n{m.log()[-3000:]}"

    def stop(self) -> None:
        for m in reversed(self.machines):
            try:
                m.stop()
            finally:
                if m.proc is not None and m.proc.poll() is None:
                    m.kill_tree()


@pytest.fixture(params=["sqlite", "postgresql"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path, redis_url: str) -> Iterator[Cluster]:
    """The machines share a store: a SQLite file (processes of one machine) or a PostgreSQL
    database (the real multi-machine set-up; skipped where PostgreSQL is missing)."""
    if request.param == "postgresql":
        store_url = request.getfixturevalue("pg_url")
    else:
        (tmp_path / "shared").mkdir()
        store_url = f"sqlite://{tmp_path / 'shared' / 'runner.db'}"
    yield from _cluster(tmp_path, redis_url, store_url)


@pytest.fixture
def pg_cluster(tmp_path: Path, redis_url: str, pg_url: str) -> Iterator[Cluster]:
    """The machines on PostgreSQL only (what a test of the database server itself needs)."""
    yield from _cluster(tmp_path, redis_url, pg_url)


def _cluster(tmp_path: Path, redis_url: str, store_url: str) -> Iterator[Cluster]:
    server = FakeOpenAI().start()
    c = Cluster(tmp_path, server, redis_url, store_url)
    try:
        yield c
    finally:
        c.stop()
        if c._pg is not None:
            c._pg.close()
        server.stop()


def wait_ready_all(cluster: Cluster, machines: list[Machine], text: str = "ready") -> None:
    deadline = time.monotonic() + 40
    for m in machines:
        cluster.wait_ready(m, text, timeout=max(1.0, deadline - time.monotonic()))
