"""Helpers for the `runner serve` tests: a real serve subprocess, the ledger read straight from
the store (SQLite, or the test's PostgreSQL database), polling with a deadline, a small tmpfs for full-disk faults."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.conftest import Project, open_db

SERVE_CONFIG = """
serve:
  max_parallel: {max_parallel}
  shutdown_grace: {shutdown_grace}
  heartbeat_s: 0.5
  kill_grace: 0.5
"""


def wait_for(check: Callable[[], Any], timeout: float = 15.0, interval: float = 0.05, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or check}")
        time.sleep(interval)


def rows(
    home: Path, sql: str = "SELECT * FROM runs ORDER BY slot, attempt", params: tuple[Any, ...] = ()
) -> list[dict[str, Any]]:
    url = os.environ.get("RUNNER_DATABASE_URL")  # --store postgresql: the test's database
    if not url and not (home / "runner.db").exists():
        return []
    db = open_db(home, url, timeout=30)
    db.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in db.execute(sql, params)]
    except sqlite3.OperationalError:  # tables not created yet
        return []
    finally:
        db.close()


def in_a_tool_call(home: Path, timeout: float = 30.0) -> dict[str, Any]:
    """The run whose first tool call has started (its ``tool_call`` event is in the store): a
    signal or a cancel sent from now on comes during that step, not between the model's turn and
    the tool (where a stopped run rightly never starts the tool)."""
    found = wait_for(
        lambda: rows(
            home,
            "SELECT * FROM runs r WHERE EXISTS (SELECT 1 FROM run_events e "
            "WHERE e.run_id = r.id AND e.kind = 'tool_call')",
        ),
        timeout,
        what="the first tool call",
    )
    return found[0]


def marker(seconds: int | None = None) -> str:
    """A sleep duration (``seconds``, else 20-25 s) no other process on the machine runs: ``sleep
    MARKER`` is found by it."""
    return f"{seconds or random.randint(20, 25)}.{os.getpid()}{random.randint(1000, 9999)}"


def sleeping(mark: str) -> list[int]:
    """The pids of processes running ``sleep MARK`` (sandboxed ones too: seen from the host)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[-2:] == [mark.encode(), b""] or argv[-1:] == [mark.encode()]:
            found.append(int(entry.name))
    return found


def job_rows(home: Path, job: str) -> list[dict[str, Any]]:
    return rows(home, "SELECT * FROM runs WHERE job=? ORDER BY slot, attempt", (job,))


def ts(text: str | None) -> datetime:
    assert text, "missing timestamp"
    return datetime.fromisoformat(text)


def write_config(
    project: Project, *, max_parallel: int = 8, shutdown_grace: float = 3.0, worker_max_runs: int | None = None
) -> None:
    project.home.mkdir(parents=True, exist_ok=True)
    text = textwrap.dedent(SERVE_CONFIG.format(max_parallel=max_parallel, shutdown_grace=shutdown_grace))
    if worker_max_runs is not None:
        text += f"  worker_max_runs: {worker_max_runs}\n"
    (project.home / "config.yaml").write_text(text)


class ServeProc:
    """``python -m runner serve`` as a real subprocess; its stderr goes to a file."""

    count = 0

    def __init__(self, project: Project, *args: str):
        ServeProc.count += 1
        self.project = project
        self.log_path = project.root / f"serve-{ServeProc.count}.stderr"
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runner", "serve", *args],
            env=project.env(),
            cwd=project.root,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text()

    def started(self, timeout: float = 20.0) -> ServeProc:
        wait_for(lambda: "serve started" in self.log() or self.proc.poll() is not None, timeout, what="serve to start")
        assert self.proc.poll() is None, self.log()
        return self

    def wait_log(self, text: str, timeout: float = 15.0) -> None:
        wait_for(lambda: text in self.log(), timeout, what=f"{text!r} in the serve log")

    def send(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._log.close()
        return code


def serve_factory(project: Project) -> Iterator[Callable[[], ServeProc]]:
    """Body of the ``serve`` fixture each serve test module declares: start serves, kill leftovers."""
    started: list[ServeProc] = []

    def start() -> ServeProc:
        proc = ServeProc(project)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.proc.poll() is None:
            proc.stop(signal.SIGKILL)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@contextmanager
def small_tmpfs(parent: Path, size_mb: int) -> Iterator[Path]:
    """A real tmpfs of ``size_mb`` MB under ``parent`` (needs root, or CAP_SYS_ADMIN), unmounted
    after; the test is skipped where mounting is not allowed."""
    import pytest

    mnt = parent / "small"
    mnt.mkdir()
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0700", "tmpfs", str(mnt)], capture_output=True, text=True
    )
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
