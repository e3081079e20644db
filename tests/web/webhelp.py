"""Helpers for the web tests: a project with real runs, and a real `runner web` subprocess."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.testing import FakeOpenAI, call, final
from tests.conftest import REPO, assert_throwaway_home, open_db

CHROMIUM = "/usr/bin/chromium"
PLANTED_KEY = "sk-planted-web-secret-7f3a9c2e5b1d4e6f8a0b"
XSS = '<script>document.title="pwned"</script><img src=x onerror="document.title=\'pwned\'">'
JOBS = """
jobs:
  hello:
    prompt: Say hello.
    toolsets: [terminal]
  nightly:
    prompt: The nightly report.
    schedule: "0 2 * * *"
    toolsets: [terminal]
  xss:
    prompt: Write something nasty.
  slow:
    prompt: Take your time.
    toolsets: [terminal]
  later:
    prompt: Check again later.
    toolsets: [schedule]
    followups: {max_pending: 3, max_delay: 1d}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Site:
    """A project folder, its RUNNER_HOME, the fake model, and helpers to run the CLI."""

    root: Path
    home: Path
    userhome: Path
    fake: FakeOpenAI
    procs: list[subprocess.Popen[str]] = field(default_factory=list)
    database_url: str | None = None  # --store postgresql: the module's own database

    def open_store(self) -> Any:
        """The site's ``Store``: runner.db, or (``--store postgresql``) its PostgreSQL database."""
        from runner.store import Store
        from runner.store.dialect import PgURL

        return Store.open(PgURL(self.database_url) if self.database_url else self.home / "runner.db")

    def db(self) -> Any:
        """A connection with sqlite3's shape to the site's store (see ``tests.conftest.open_db``)."""
        return open_db(self.home, self.database_url)

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RUNNER_"))}
        env.update(
            HOME=str(self.userhome),
            RUNNER_HOME=str(self.home),
            RUNNER_JOBS=str(self.root / "jobs.yaml"),
            OPENAI_BASE_URL=self.fake.base_url,
            OPENAI_API_KEY=PLANTED_KEY,
            PYTHONPATH=str(REPO),
        )
        if self.database_url:
            env["RUNNER_DATABASE_URL"] = self.database_url
        env.update(extra)
        assert_throwaway_home(env)
        return env

    def cli(self, *args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "runner", *args],
            env=self.env(),
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check:
            assert proc.returncode == 0, proc.stderr[-2000:]
        return proc

    def run_job(self, name: str, *replies: Any) -> str:
        """Run job ``name`` to its end with the model's ``replies``; return the run id."""
        self.fake.add(*replies)
        proc = self.cli("run-job", name, "--json")
        import json

        return str(json.loads(proc.stdout)["id"])

    def start_job(self, name: str, *replies: Any) -> subprocess.Popen[str]:
        """Start `runner run-job NAME` in the background (its replies queued first)."""
        self.fake.add(*replies)
        proc = subprocess.Popen(
            [sys.executable, "-m", "runner", "run-job", name],
            env=self.env(),
            cwd=self.root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)


def make_site(base: Path, fake: FakeOpenAI, database_url: str | None = None) -> Site:
    root, home, userhome = base / "proj", base / "home", base / "userhome"
    for folder in (root, userhome):
        folder.mkdir(parents=True)
    (root / "jobs.yaml").write_text(textwrap.dedent(JOBS))
    home.mkdir(mode=0o700)
    (home / "config.yaml").write_text("kanban:\n  default_job: hello\n")
    return Site(root=root, home=home, userhome=userhome, fake=fake, database_url=database_url)


def seed_runs(site: Site) -> dict[str, str]:
    """Real runs through the CLI: a tool call and an answer, a failure, an XSS output."""
    ids = {
        "hello": site.run_job(
            "hello", call("terminal", {"command": "echo hello-from-tool"}), final("# Hello\n\n*done*")
        ),
        "xss": site.run_job("xss", final(f"Look: {XSS}\n\n[click](javascript:alert(1))")),
    }
    site.fake.add(*[final(f"nightly {i}") for i in range(3)])
    for _ in range(3):
        site.cli("run-job", "nightly")
    site.cli("kanban", "add", "first task", "--job", "hello")
    site.cli("kanban", "add", "second task", "--job", "hello")
    return ids


@dataclass
class WebServer:
    proc: subprocess.Popen[str]
    url: str
    port: int

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            _, err = self.proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate(timeout=5)
        return err


def start_web(
    site: Site, *args: str, bind: str | None = None, wait: bool = True, env: dict[str, str] | None = None
) -> WebServer:
    """``runner web`` on ``bind`` (a free loopback port by default), ``env`` added to the site's."""
    port = free_port()
    bind = bind or f"127.0.0.1:{port}"
    port = int(bind.rpartition(":")[2])
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", "web", "--bind", bind, *args],
        env=site.env(**(env or {})),
        cwd=site.root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    server = WebServer(proc, f"http://127.0.0.1:{port}", port)
    if wait:
        wait_listening(proc, port)
    return server


def wait_listening(proc: subprocess.Popen[str], port: int, timeout: float = 30) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"runner web exited {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError("runner web never listened")


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, "no CSRF field in the page"
    return match.group(1)


PAGES = ["/", "/jobs", "/runs", "/board", "/approvals", "/credentials", "/skills", "/charts", "/metrics"]


def park_one(store: Any, job: str = "hello") -> tuple[str, Any]:
    """A run of ``job`` parked on ``rm -rf build`` for an hour: (its run id, the approval request)."""
    from datetime import timedelta

    from runner.clock import utcnow
    from runner.statuses import Trigger
    from runner.store import ledger
    from runner.store.control import park

    run_id = ledger.open_run(store, job=job, trigger=Trigger.MANUAL)
    now = utcnow()
    request = park(
        store, run_id=run_id, job=job, command="rm -rf build", reasons=("rm -r",), now=now, expires=now + timedelta(hours=1)
    )
    return run_id, request
