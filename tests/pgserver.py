"""A real PostgreSQL server for the tests: ``initdb`` into a temporary folder (as the ``postgres``
user when run as root: the server refuses to run as root), started with ``pg_ctl`` on a free
port, trust authentication on 127.0.0.1 and a private socket folder. Each test gets its own
database made from a template (``CREATE DATABASE ... TEMPLATE``) with runner's migrations
applied once, so a fresh store costs a file copy instead of the migrations.

Set RUNNER_TEST_PG=postgresql://user@host:port/postgres to use an existing server instead
(a superuser: the tests create and drop databases).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path


def _bin() -> Path:
    """The PostgreSQL binaries: $RUNNER_TEST_PG_BIN, else the newest /usr/lib/postgresql/N/bin
    (Debian's layout; the version is whatever apt installed)."""
    if os.environ.get("RUNNER_TEST_PG_BIN"):
        return Path(os.environ["RUNNER_TEST_PG_BIN"])
    def version(initdb: Path) -> int:
        name = initdb.parent.parent.name
        return int(name) if name.isdigit() else 0

    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=version)
    return found[-1].parent if found else Path("/usr/lib/postgresql/15/bin")


BIN = _bin()
TEMPLATE = "runner_template"
_serial = count(1)


def available() -> str | None:
    """Why PostgreSQL cannot run here (None when it can)."""
    if os.environ.get("RUNNER_TEST_PG"):
        return None
    if not (BIN / "initdb").exists():
        return f"PostgreSQL binaries not found in {BIN} (apt install postgresql)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install -e '.[distributed]')"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    # runuser lives in /usr/sbin, which a login shell's PATH (or env -i's) may lack
    runuser = shutil.which("runuser", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin") or "runuser"
    return [runuser, "-u", "postgres", "--", *argv]


@dataclass
class PgServer:
    """One running server; ``url(name)`` is a connection URL to database ``name``."""

    folder: Path
    port: int
    user: str
    host: str = "127.0.0.1"
    external: str | None = None
    dbs: list[str] = field(default_factory=list)

    def url(self, name: str) -> str:
        if self.external:
            return self.external.rsplit("/", 1)[0] + f"/{name}"
        return f"postgresql://{self.user}@{self.host}:{self.port}/{name}"

    def admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(sql)  # type: ignore[arg-type]

    def fresh(self, *, migrated: bool = True) -> str:
        """A new database (runner's migrations applied when ``migrated``); its URL."""
        name = f"t{os.getpid()}_{next(_serial)}"
        self.admin(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE if migrated else "template0"}"')
        self.dbs.append(name)
        return self.url(name)

    def drop(self, url: str) -> None:
        name = url.rsplit("/", 1)[1]
        self.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def make_template(self) -> None:
        from runner.store import Store
        from runner.store.dialect import PgURL

        self.admin(f'DROP DATABASE IF EXISTS "{TEMPLATE}" WITH (FORCE)')
        self.admin(f'CREATE DATABASE "{TEMPLATE}" TEMPLATE template0')
        store = Store.open(PgURL(self.url(TEMPLATE)))
        store.close()

    # -- a server of our own ------------------------------------------------------------
    @classmethod
    def start(cls) -> PgServer:
        external = os.environ.get("RUNNER_TEST_PG")
        if external:
            server = cls(Path(tempfile.gettempdir()), 0, "", external=external)
            server.make_template()
            return server
        folder = Path(tempfile.mkdtemp(prefix="runner-pg-"))
        os.chmod(folder, 0o755)
        data = folder / "data"
        user = "postgres" if os.geteuid() == 0 else os.environ.get("USER", "postgres")
        if os.geteuid() == 0:
            shutil.chown(folder, "postgres", "postgres")
        subprocess.run(
            _as_postgres([str(BIN / "initdb"), "-D", str(data), "-U", user, "-A", "trust", "--no-sync", "-E", "UTF8"]),
            check=True,
            capture_output=True,
        )
        server = cls(folder, _free_port(), user)
        server.run_ctl("start")
        server.make_template()
        return server

    def run_ctl(self, action: str, *, mode: str = "fast") -> None:
        """``pg_ctl start | stop | restart`` (stop and restart with ``-m mode``)."""
        opts = (
            f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=300"
        )
        argv = [str(BIN / "pg_ctl"), "-D", str(self.folder / "data"), "-l", str(self.folder / "log"), "-w"]
        if action != "stop":
            argv += ["-o", opts]
        if action != "start":
            argv += ["-m", mode]
        subprocess.run(_as_postgres([*argv, action]), check=True, capture_output=True, timeout=60)

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: every connection is cut; returns once the server answers again."""
        self.run_ctl("restart", mode="fast")
        self.wait_ready()

    def wait_ready(self, timeout: float = 30) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            try:
                psycopg.connect(self.url("postgres"), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop(self) -> None:
        if self.external:
            for name in self.dbs:
                self.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            return
        try:
            self.run_ctl("stop", mode="immediate")
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
