"""Local backend: commands run as subprocesses of this machine, each in its own session.

With a sandbox plan in its context (every agent run's default, ``runner.backends.sandbox``) the backend
starts one sandbox per run and runs every command, file read and file write inside it; the
sandbox's processes are still processes of this machine (timeouts kill their tree the same way),
and closing the backend ends the sandbox with everything in it. Without one, commands run as the
runner's user with its view of the machine (``sandbox: off``, ``runner backend run local``)."""

from __future__ import annotations

import os
import select
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from runner.backends.base import (
    TIMEOUT_EXIT,
    BackendContext,
    CwdState,
    ExecResult,
    OutputBuffer,
    command_env,
    default_shell,
    new_nonce,
    split_marker,
    wrap_command,
)
from runner.backends.sandbox import Box, stdio_args
from runner.errors import BackendError
from runner.host import secrets
from runner.host.procs import (
    RUN_MARK,
    end_descendants,
    group_alive,
    kill_marked,
    kill_tree,
    nothing_left,
    start_time,
    wait_or_cut,
)

if TYPE_CHECKING:
    from runner.backends.spec import LocalSpec

KILL_GRACE_S = 0.5
#: every command of a run carries RUNNER_RUN_MARK=<run id>-<this backend's nonce> in its environment,
#: so close() finds what it left behind even after ``setsid``/double fork took it out of the tree, and
#: so does the recovery of a run whose process was killed before close() (runner.store.runs)
MARK_VAR = RUN_MARK


class LocalBackend:
    #: True without a sandbox: the file tools then open files from the runner process itself
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
        self._base_env = {**command_env(secrets.environ(), passthrough=ctx.env_passthrough), **ctx.env}
        self._mark = f"{ctx.run_id or 'adhoc'}-{self._nonce}"
        if not Path(self.workdir).is_dir():
            raise BackendError(f"local backend: workdir {self.workdir} does not exist")
        self._box: Box | None = None
        if ctx.sandbox is not None:
            self._base_env["TMPDIR"] = "/tmp"  # the sandbox's own
            self._box = Box(ctx.sandbox)
            self.is_local = False

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
        proc = self._start([self._shell, "-c", script], child_env)
        with self._lock:
            self._groups[proc.pid] = start_time(proc.pid)
        buf = OutputBuffer(self.ctx.output_cap)
        reader = threading.Thread(target=_pump, args=(proc.stdout, buf), daemon=True)
        reader.start()
        cut = self.ctx.cut
        ended = wait_or_cut(proc.wait, timeout, cut)
        was_cut = not ended and cut is not None and cut.is_set()
        timed_out = not ended and not was_cut
        if not ended:  # the run's cut gives the tree serve's kill_grace, a timeout half a second
            kill_tree(proc.pid, cut.grace if was_cut and cut is not None else KILL_GRACE_S, group=proc.pid)
            proc.wait(None)
        # background children may keep the pipe open; do not wait for them
        reader.join(timeout=0.2 if ended else 1.0)
        if not ended or not group_alive(proc.pid):
            with self._lock:
                self._groups.pop(proc.pid, None)
        text, new_cwd = split_marker(buf.text(), self._nonce)
        if ended:
            with self._lock:
                self._cwd.update(new_cwd)
        code = TIMEOUT_EXIT if timed_out else proc.code()
        if code is not None and code < 0:
            code = 128 - code
        return ExecResult(
            exit_code=int(code if code is not None else -1),
            output=text,
            timed_out=timed_out,
            duration_s=time.monotonic() - start,
            cwd=self._cwd.cwd,
        )

    def _start(self, argv: list[str], env: dict[str, str]) -> Started:
        """Start one command's shell in a session of its own, in the sandbox when there is one."""
        if self._box is not None:
            read_end, write_end = os.pipe()
            try:
                spawned = self._box.spawn(argv, env, self.workdir, write_end)
            except BaseException:
                os.close(read_end)
                raise
            return Started(spawned.pid, read_end, spawned.wait, lambda: spawned.returncode)
        try:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.workdir,
                start_new_session=True,
            )
        except OSError as exc:
            raise BackendError(f"local backend: cannot start {self._shell}: {exc}") from exc
        assert popen.stdout is not None
        stdout = os.dup(popen.stdout.fileno())
        popen.stdout.close()
        return Started(popen.pid, stdout, lambda timeout: exited_within(popen, timeout), lambda: popen.returncode)

    def read_file(self, path: str) -> bytes:
        # FileNotFoundError, IsADirectoryError, PermissionError... are the caller's to report
        if self._box is not None:
            return self._box.read(self._cwd.absolute(path))
        return Path(self._cwd.absolute(path)).read_bytes()

    def write_file(self, path: str, data: bytes) -> None:
        if self._box is not None:
            self._box.write(self._cwd.absolute(path), data, new_nonce())
            return
        target = Path(self._cwd.absolute(path))
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{new_nonce()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, target)

    def stdio_command(
        self, argv: Sequence[str], env: Mapping[str, str], cwd: str | None
    ) -> tuple[list[str], dict[str, str]] | None:
        """A stdio MCP server of a sandboxed run: bubblewrap around it, in a sandbox of its own
        with the run's plan (the run's commands cannot read its variables); None without a
        sandbox (the server runs on the host, as the runner's user)."""
        if self._box is None:
            return None

        return stdio_args(self._box.plan, argv, self._cwd.resolve(cwd)), dict(env)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._lock:
            groups, self._groups = dict(self._groups), {}
        for pgid, start in groups.items():
            kill_tree(pgid, 0, start=start, group=pgid)
        if self._box is not None:
            self._box.close()  # and with it everything still running inside
            return
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


@dataclass(frozen=True)
class Started:
    """A command's shell, started: its pid on this machine, the read end of its output, its exit."""

    pid: int
    stdout: int
    #: wait(timeout) -> True when it exited within timeout seconds (None: however long it takes)
    wait: Callable[[float | None], bool]
    #: the exit code once it exited (negative: killed by that signal)
    code: Callable[[], int | None]


def exited_within(proc: subprocess.Popen[bytes], timeout: float | None) -> bool:
    """Wait for ``proc`` to exit, at most ``timeout`` seconds; True when it did (it is reaped).

    A pidfd (Linux 5.3+) wakes the caller the moment the child exits. ``Popen.wait(timeout=)``
    polls instead, sleeping 0.5, 1, 2 ... 50 ms between looks, so a command of 2 ms was seen
    ending 1-3 ms late, and a slow one up to 50 ms late: time every command of a run pays."""
    if timeout is None:
        proc.wait()
        return True
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


def _pump(fd: int, buf: OutputBuffer) -> None:
    try:
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buf.feed(chunk)
    finally:
        os.close(fd)


def from_spec(spec: LocalSpec, *, ctx: BackendContext) -> LocalBackend:
    return LocalBackend(ctx)
