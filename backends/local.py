"""Local backend: commands run as subprocesses of this machine, each in its own session."""

from __future__ import annotations

import os
import select
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from backends.base import (
    TIMEOUT_EXIT,
    BackendContext,
    CwdState,
    ExecResult,
    OutputBuffer,
    default_shell,
    new_nonce,
    scrub_env,
    split_marker,
    wrap_command,
)
from runner import secrets
from runner.errors import BackendError
from runner.procs import (
    RUN_MARK,
    end_descendants,
    group_alive,
    kill_marked,
    kill_tree,
    nothing_left,
    start_time,
)

if TYPE_CHECKING:
    from backends.spec import LocalSpec

KILL_GRACE_S = 0.5
#: every command of a run carries RUNNER_RUN_MARK=<run id>-<this backend's nonce> in its environment,
#: so close() finds what it left behind even after ``setsid``/double fork took it out of the tree, and
#: so does the recovery of a run whose process was killed before close() (runner.store.runs)
MARK_VAR = RUN_MARK


class LocalBackend:
    is_local: bool = True

    def __init__(self, ctx: BackendContext):
        self.ctx = ctx
        self.workdir = str(ctx.workdir)
        self._cwd = CwdState(self.workdir)
        self._nonce = new_nonce()
        self._shell = default_shell()
        self._lock = threading.Lock()
        self._groups: dict[
            int, str | None
        ] = {}  # command sessions that may still have processes: pgid -> start time of its leader
        self._closed = False
        self._base_env = scrub_env(secrets.environ(), passthrough=ctx.env_passthrough, secret_values=ctx.secret_values)
        self._mark = f"{ctx.run_id or 'adhoc'}-{self._nonce}"
        if not Path(self.workdir).is_dir():
            raise BackendError(f"local backend: workdir {self.workdir} does not exist")

    # -- protocol -------------------------------------------------------------------------
    def run(
        self,
        command: str,
        *,
        cwd: str | None = None,
        timeout: float,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        if self._closed:
            raise BackendError("local backend is closed")
        start = time.monotonic()
        here = self._cwd.resolve(cwd)
        child_env = dict(self._base_env)
        if env:
            child_env.update(env)
        child_env[MARK_VAR] = self._mark
        script = wrap_command(command, here, self._nonce)
        try:
            proc = subprocess.Popen(
                [self._shell, "-c", script],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=child_env,
                cwd=self.workdir,
                start_new_session=True,
            )
        except OSError as exc:
            raise BackendError(f"local backend: cannot start {self._shell}: {exc}") from exc
        with self._lock:
            self._groups[proc.pid] = start_time(proc.pid)
        buf = OutputBuffer(self.ctx.output_cap)
        reader = threading.Thread(target=_pump, args=(proc, buf), daemon=True)
        reader.start()
        timed_out = not exited_within(proc, timeout)
        if timed_out:
            kill_tree(proc.pid, KILL_GRACE_S, group=proc.pid)
            proc.wait()
        # background children may keep the pipe open; do not wait for them
        reader.join(timeout=0.2 if not timed_out else 1.0)
        if timed_out or not group_alive(proc.pid):
            with self._lock:
                self._groups.pop(proc.pid, None)
        text, new_cwd = split_marker(buf.text(), self._nonce)
        if not timed_out:
            with self._lock:
                self._cwd.update(new_cwd)
        code = TIMEOUT_EXIT if timed_out else proc.returncode
        if code is not None and code < 0:
            code = 128 - code
        return ExecResult(
            exit_code=int(code if code is not None else -1),
            output=text,
            timed_out=timed_out,
            duration_s=time.monotonic() - start,
            cwd=self._cwd.cwd,
        )

    def read_file(self, path: str) -> bytes:
        # FileNotFoundError, IsADirectoryError, PermissionError... are the caller's to report
        return Path(self._cwd.absolute(path)).read_bytes()

    def write_file(self, path: str, data: bytes) -> None:
        target = Path(self._cwd.absolute(path))
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{new_nonce()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, target)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._lock:
            groups, self._groups = dict(self._groups), {}
        for pgid, start in groups.items():
            kill_tree(pgid, 0, start=start, group=pgid)
        if nothing_left():
            return  # a run's own process (a subreaper) with no child: no command left anything behind
        kill_marked(MARK_VAR, self._mark)  # what left the command sessions (setsid, double fork)
        end_descendants()  # in a run's own process: what also cleared its environment (a no-op elsewhere)

    def __enter__(self) -> LocalBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers --------------------------------------------------------------------------
    @property
    def cwd(self) -> str:
        return self._cwd.cwd


def exited_within(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """Wait for ``proc`` to exit, at most ``timeout`` seconds; True when it did (it is reaped).

    A pidfd (Linux 5.3+) wakes the caller the moment the child exits. ``Popen.wait(timeout=)``
    polls instead, sleeping 0.5, 1, 2 ... 50 ms between looks, so a command of 2 ms was seen
    ending 1-3 ms late, and a slow one up to 50 ms late: time every command of a run pays."""
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # an older kernel, or no pidfd_open in this Python
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        deadline = time.monotonic() + timeout
        while not poller.poll(min(max(0.0, deadline - time.monotonic()), 3600.0) * 1000):  # poll's int ms
            if time.monotonic() >= deadline:
                return False
    finally:
        os.close(fd)
    proc.wait()
    return True


def _pump(proc: subprocess.Popen[bytes], buf: OutputBuffer) -> None:
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        buf.feed(chunk)
    proc.stdout.close()


def from_spec(spec: LocalSpec, *, ctx: BackendContext) -> LocalBackend:
    return LocalBackend(ctx)
