"""SSH backend: commands run on a remote host through the system OpenSSH client.

One master connection per backend (ControlMaster=auto, ControlPersist) carries every command
and file transfer, so a command costs a channel, not a handshake. Using the system client means
``~/.ssh/config``, agents and ProxyJump work as the person expects. BatchMode is always on: a
prompt for a password or a host key would hang an unattended run.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from itertools import count
from pathlib import Path
from typing import IO, Any

from backends.base import (
    READ_SCRIPT,
    WRITE_SCRIPT,
    BackendContext,
    CwdState,
    ExecResult,
    StreamPump,
    decode,
    file_error,
    finish_or_kill,
    kill_group_script,
    kill_groups_script,
    make_result,
    new_nonce,
    pidfile_for,
    wrap_command,
    wrap_remote,
)
from backends.ssh_spec import SSHSpec
from runner.errors import BackendError, UsageError
from runner.lazyre import LazyPattern

SUN_PATH_MAX = 100  # sockaddr_un holds 108 bytes; ssh adds a temporary suffix while binding
CONTROL_PERSIST = "60s"
TRANSFER_TIMEOUT = 300.0
_ENV_NAME = LazyPattern(r"[A-Za-z_][A-Za-z0-9_]*")


def control_path(home: Path, nonce: str) -> Path:
    """A short, private ControlPath under RUNNER_HOME/run, or under /tmp when that is too long."""
    name = f"ssh-{nonce}"
    folder = Path(home) / "run"
    if len(str(folder / name)) + 17 > SUN_PATH_MAX:
        digest = hashlib.sha1(str(home).encode()).hexdigest()[:10]
        folder = Path(tempfile.gettempdir()) / f"runner-ssh-{digest}"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = folder.lstat()
    if folder.is_symlink() or info.st_uid != os.getuid():
        raise BackendError(f"ssh: control socket folder {folder} is not owned by this user")
    return folder / name


class SSHBackend:
    is_local: bool = False

    def __init__(self, spec: SSHSpec, ctx: BackendContext):
        self.ctx = ctx
        self.spec = spec
        self._nonce = new_nonce()
        self._seq = count(1)
        self._lock = threading.Lock()
        self._groups: set[int] = set()
        self._closed = False
        self.control_path = control_path(ctx.home, self._nonce)
        self._argv = spec.ssh_argv(self.control_path, CONTROL_PERSIST)
        self.workdir = self._connect()
        self._cwd = CwdState(self.workdir)

    # -- protocol -------------------------------------------------------------------------
    def run(
        self,
        command: str,
        *,
        cwd: str | None = None,
        timeout: float,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        self._check_open()
        started = time.monotonic()
        pidfile = pidfile_for(self._nonce, next(self._seq))
        script = wrap_command(_exports(env) + command, self._cwd.resolve(cwd), self._nonce)
        with tempfile.TemporaryFile() as errors:
            proc = self._popen(wrap_remote(script, pidfile=pidfile, nonce=self._nonce), errors)
            assert proc.stdout is not None
            with proc.stdout:
                pump = StreamPump(_chunks(proc.stdout.fileno()), self._nonce, self.ctx.output_cap)
                timed_out = finish_or_kill(
                    pump, timeout, kill=lambda: self._quiet(kill_group_script(pidfile)), abort=proc.kill
                )
                if proc.poll() is None:
                    proc.terminate()  # complete, but a background child still holds the channel
                returncode = proc.wait()
            code = pump.stream.exit_code
            if code is None and not timed_out:
                if returncode == 255:
                    raise BackendError(f"ssh {self.spec.destination}: {_read_all(errors)}")
                code = returncode
        if pump.stream.group:
            with self._lock:
                self._groups.add(pump.stream.group)
        return make_result(pump, self._nonce, self._cwd, self._lock, code, timed_out, started)

    def read_file(self, path: str) -> bytes:
        self._check_open()
        done = self._transfer(_sh(READ_SCRIPT, self._cwd.absolute(path)), b"")
        if done.returncode != 0:
            raise file_error(path, done.stderr)
        return done.stdout

    def write_file(self, path: str, data: bytes) -> None:
        self._check_open()
        done = self._transfer(_sh(WRITE_SCRIPT, self._cwd.absolute(path), f"runner-{new_nonce()}"), data)
        if done.returncode != 0:
            raise file_error(path, done.stderr)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._lock:
            groups, self._groups = sorted(self._groups), set()
        try:
            if groups:
                self._quiet(kill_groups_script(groups))
        finally:
            self._end_master()

    def __enter__(self) -> SSHBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers --------------------------------------------------------------------------
    @property
    def cwd(self) -> str:
        return self._cwd.cwd

    def _connect(self) -> str:
        """Open the master connection and return the remote workdir (absolute)."""
        target = self.spec.workdir or "."
        if target == "~" or target.startswith("~/"):
            target_expr = '"$HOME"' + shlex.quote(target[1:]) if target != "~" else '"$HOME"'
        else:
            target_expr = shlex.quote(target)
        probe = f"cd -- {target_expr} && pwd"
        done = self._transfer(_sh(probe), b"", timeout=self.spec.connect_timeout + 20.0)
        if done.returncode != 0:
            self._end_master()
            reason = decode(done.stderr).strip() or f"exit {done.returncode}"
            raise BackendError(f"ssh {self.spec.destination}: bad remote workdir {target!r} ({reason})")
        lines = decode(done.stdout).strip().splitlines()
        if not lines or not lines[-1].startswith("/"):
            self._end_master()
            raise BackendError(f"ssh {self.spec.destination}: could not determine the remote workdir")
        return lines[-1]

    def _popen(self, script: str, errors: IO[bytes]) -> subprocess.Popen[bytes]:
        try:
            return subprocess.Popen(
                [*self._argv, self.spec.host, _sh(script)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=errors,
            )
        except OSError as exc:
            raise BackendError(f"ssh: cannot start the ssh client: {exc}") from exc

    def _transfer(self, remote: str, data: bytes, *, timeout: float = TRANSFER_TIMEOUT) -> Any:
        """Run ``remote`` with ``data`` on stdin; BackendError if ssh itself failed (exit 255)."""
        try:
            done = subprocess.run(
                [*self._argv, self.spec.host, remote], input=data, capture_output=True, timeout=timeout
            )
        except subprocess.TimeoutExpired as exc:
            raise BackendError(f"ssh {self.spec.destination}: no answer within {timeout:.0f}s") from exc
        except OSError as exc:
            raise BackendError(f"ssh: cannot start the ssh client: {exc}") from exc
        if done.returncode == 255:
            reason = decode(done.stderr).strip() or "connection failed"
            raise BackendError(f"ssh {self.spec.destination}: {reason}")
        return done

    def _quiet(self, script: str) -> None:
        self._transfer(_sh(script), b"", timeout=15.0)

    def _end_master(self) -> None:
        subprocess.run([*self._argv, "-O", "exit", self.spec.host], capture_output=True, timeout=15, check=False)
        deadline = time.monotonic() + 3.0
        while self.control_path.exists() and time.monotonic() < deadline:
            time.sleep(0.02)

    def _check_open(self) -> None:
        if self._closed:
            raise BackendError(f"ssh {self.spec.destination}: backend is closed")


def _sh(script: str, *args: str) -> str:
    """The remote command line that runs ``script`` under /bin/sh whatever the login shell is."""
    return " ".join(["exec /bin/sh -c", shlex.quote(script), "sh", *map(shlex.quote, args)])


def _exports(env: Mapping[str, str] | None) -> str:
    lines = []
    for name, value in (env or {}).items():
        if not _ENV_NAME.fullmatch(name):
            raise UsageError(f"ssh backend: invalid environment variable name {name!r}")
        lines.append(f"export {name}={shlex.quote(value)}\n")
    return "".join(lines)


def _chunks(fd: int) -> Iterator[bytes]:
    while chunk := os.read(fd, 65536):
        yield chunk


def _read_all(errors: IO[bytes]) -> str:
    errors.seek(0)
    return decode(errors.read()).strip() or "connection failed"


def from_spec(spec: SSHSpec, *, ctx: BackendContext) -> SSHBackend:
    return SSHBackend(spec, ctx)
