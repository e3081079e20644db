"""SSH backend: commands run on a remote host through the system OpenSSH client.

One master connection per backend (ControlMaster=auto, ControlPersist) carries every session.
A session runs a persistent remote shell (``runner/backends/ssh_shell.py``) that takes commands and file
reads/writes on its stdin, so a command costs a fork on the host, not a session whose login shell
sources ``~/.bashrc``. Starting the first shell is also the connect and the workdir probe (one
round trip). Commands that overlap get shells of their own (a pool; idle ones are reused); a
command whose background job still holds the output ends its shell's session, so late output
never reaches a later command. A shell that dies during a command is replaced once and the
command's result says so; one found dead before the command started is replaced and the command
sent again. Using the system client means ``~/.ssh/config``, agents and ProxyJump work as the
person expects. BatchMode is always on: a prompt for a password or a host key would hang an
unattended run.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from itertools import count
from pathlib import Path
from typing import Any

from runner.backends.base import (
    WRITE_SCRIPT,
    BackendContext,
    CwdState,
    ExecResult,
    decode,
    file_error,
    kill_groups_script,
    make_result,
    new_nonce,
    wrap_command,
)
from runner.backends.ssh_shell import (
    MAX_INLINE_WRITE,
    RAW_CAP,
    READ_INLINE,
    Exchange,
    RemoteShell,
    kill_command_script,
    launch_args,
    loop_script,
    shell_pidfile,
    with_args,
    write_inline,
)
from runner.backends.ssh_spec import SSHSpec
from runner.errors import BackendError, UsageError

SUN_PATH_MAX = 100  # sockaddr_un holds 108 bytes; ssh adds a temporary suffix while binding
CONTROL_PERSIST = "60s"
TRANSFER_TIMEOUT = 300.0
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
LOST_NOTE = "\n[runner: the remote shell ended during this command (ssh exit {status}); a new shell was started]\n"


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
        self._shell_ids = count(1)
        self._lock = threading.Lock()
        self._groups: set[int] = set()
        self._closed = False
        #: every live persistent shell, and the ones of them waiting for a command
        self._shells: set[RemoteShell] = set()
        self._idle: list[RemoteShell] = []
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
        if "\0" in command or any("\0" in value for value in (env or {}).values()):
            raise UsageError("ssh backend: a command or environment value contains a NUL byte")
        started = time.monotonic()
        seq = next(self._seq)
        script = wrap_command(_exports(env) + command, self._cwd.resolve(cwd), self._nonce)
        done, lost = self._exchange(script, seq, timeout, self.ctx.output_cap, kill_on_timeout=True)
        stream = done.pump.stream
        if stream.group:
            with self._lock:
                self._groups.add(stream.group)
        result = make_result(
            done.pump,
            self._nonce,
            self._cwd,
            self._lock,
            stream.exit_code if lost is None else lost,
            done.timed_out,
            started,
        )
        if lost is not None:
            result = replace(result, output=result.output + LOST_NOTE.format(status=lost))
        return result

    def read_file(self, path: str) -> bytes:
        self._check_open()
        done = self._file_exchange(with_args(READ_INLINE, self._cwd.absolute(path)), f"reading {path}")
        if done.pump.stream.exit_code != 0:
            raise file_error(path, done.pump.stream.buffer.text())
        return bytes(done.pump.stream.buffer.head)

    def write_file(self, path: str, data: bytes) -> None:
        self._check_open()
        args = (self._cwd.absolute(path), f"runner-{new_nonce()}")
        script = with_args(write_inline(data), *args)
        if len(script) > MAX_INLINE_WRITE:  # too big for one argument: its own channel, data on stdin
            done = self._transfer(_sh(WRITE_SCRIPT, *args), data)
            if done.returncode != 0:
                raise file_error(path, done.stderr)
            return
        exchange = self._file_exchange(script, f"writing {path}")
        if exchange.pump.stream.exit_code != 0:
            raise file_error(path, exchange.pump.stream.buffer.text())

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            groups, self._groups = sorted(self._groups), set()
        try:
            if groups:
                self._control(kill_groups_script(groups))
        finally:
            with self._lock:
                shells, self._shells, self._idle = list(self._shells), set(), []
            for shell in shells:
                shell.stop()
            self._end_master()
            for shell in shells:
                shell.reap()

    def __enter__(self) -> SSHBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stdio_command(
        self, argv: Sequence[str], env: Mapping[str, str], cwd: str | None
    ) -> tuple[list[str], dict[str, str]]:
        """``ssh`` over this backend's master connection running ``argv`` in the remote workdir,
        stdin and stdout wired through (a stdio MCP server runs on the remote host). Variables
        are exported on the remote command line (visible in the process lists of both hosts)."""
        self._check_open()
        script = f"cd -- {shlex.quote(self._cwd.resolve(cwd))} || exit 127\n{_exports(env)}exec \"$@\""
        return [*self._argv, self.spec.host, _sh(script, *argv)], {}

    # -- helpers --------------------------------------------------------------------------
    @property
    def cwd(self) -> str:
        return self._cwd.cwd

    def _connect(self) -> str:
        """Start the master connection and the first shell in one round trip; the remote workdir."""
        target = self.spec.workdir or "."
        if target == "~" or target.startswith("~/"):
            target_expr = '"$HOME"' + shlex.quote(target[1:]) if target != "~" else '"$HOME"'
        else:
            target_expr = shlex.quote(target)
        try:
            shell, where = self._spawn(f"cd -- {target_expr} || exit 1", failed=f"bad remote workdir {target!r}")
        except BackendError:
            self._end_master()
            raise
        if not where.startswith("/"):
            self.close()
            raise BackendError(f"ssh {self.spec.destination}: could not determine the remote workdir")
        self._give_back(shell)
        return where

    def _spawn(self, probe: str, *, failed: str) -> tuple[RemoteShell, str]:
        """A new persistent shell (over the master, which the first one starts) and its cwd."""
        pidfile = shell_pidfile(self._nonce, next(self._shell_ids))
        shell = RemoteShell(
            [*self._argv, self.spec.host, _sh(*launch_args(loop_script(self._nonce, probe, pidfile)))], pidfile
        )
        try:
            where = shell.wait_ready(self._nonce, self.spec.connect_timeout + 20.0)
        except TimeoutError as exc:
            shell.kill()
            shell.reap()
            raise BackendError(f"ssh {self.spec.destination}: {exc}") from exc
        if where is None:
            status = shell.status()
            reason = shell.errors() or f"exit {status}"
            shell.reap()
            if status == 255:
                raise BackendError(f"ssh {self.spec.destination}: {reason}")
            raise BackendError(f"ssh {self.spec.destination}: {failed} ({reason})")
        with self._lock:
            self._shells.add(shell)
        return shell, where

    def _take(self) -> RemoteShell:
        """An idle shell of the pool, else a new one (commands of one run may overlap)."""
        shell = self._take_idle()
        if shell is not None:
            return shell
        self._check_open()
        probe = f"cd -- {shlex.quote(self.workdir)} 2>/dev/null || cd /"
        return self._spawn(probe, failed="the remote shell did not start")[0]

    def _take_idle(self) -> RemoteShell | None:
        while True:
            with self._lock:
                if not self._idle:
                    return None
                shell = self._idle.pop()
            if shell.alive:
                return shell
            self._drop(shell)

    def _give_back(self, shell: RemoteShell, *, keep: bool = True) -> None:
        """Back to the pool; or ended, when a background job of its command still holds its output."""
        with self._lock:
            if keep and shell in self._shells:
                self._idle.append(shell)
                return
            self._shells.discard(shell)
        shell.stop()
        shell.reap()

    def _drop(self, shell: RemoteShell) -> None:
        with self._lock:
            self._shells.discard(shell)
        shell.kill()
        shell.reap()

    def _exchange(
        self, script: str, seq: int, timeout: float, cap: int, *, kill_on_timeout: bool
    ) -> tuple[Exchange, int | None]:
        """Run ``script`` on a shell of the pool. The second value is the ssh exit status when
        the shell died during the command: it is replaced once (BackendError if the host is gone)
        and the command's result says so. A shell found dead before the command started is
        replaced once and the command sent again."""
        deadline = time.monotonic() + timeout
        shell = self._take()
        cut = self.ctx.cut if kill_on_timeout else None  # a command ends with its run's cut; a file transfer does not
        done = shell.exchange(
            script, seq=seq, timeout=timeout, cap=cap, kill=self._killer(shell, seq, kill_on_timeout), cut=cut
        )
        if done.complete or done.timed_out:
            return self._settle(shell, done), None
        status = shell.status()
        self._drop(shell)
        fresh = self._restart(shell)
        self._give_back(fresh)
        if done.started:  # what the command left running dies with it
            self._control(kill_command_script(shell.pidfile, seq, remove=True))
            return done, 255 if status is None else status
        fresh = self._take()
        left = max(deadline - time.monotonic(), 0.1)
        done = fresh.exchange(
            script, seq=seq, timeout=left, cap=cap, kill=self._killer(fresh, seq, kill_on_timeout), cut=cut
        )
        if done.complete or done.timed_out:
            return self._settle(fresh, done), None
        status = fresh.status()
        self._drop(fresh)
        if done.started:
            return done, 255 if status is None else status
        raise BackendError(
            f"ssh {self.spec.destination}: the remote shell ended twice ({fresh.errors() or 'no message'})"
        )

    def _killer(self, shell: RemoteShell, seq: int, wanted: bool) -> Callable[[], None]:
        """What a timeout does before the shell is given up: kill the command's process group."""
        script = kill_command_script(shell.pidfile, seq)
        return (lambda: self._control(script)) if wanted else (lambda: None)

    def _settle(self, shell: RemoteShell, done: Exchange) -> Exchange:
        if done.complete:  # a group left after a timeout was just killed: only zombies remain
            self._give_back(shell, keep=done.timed_out or not done.pump.stream.group)
        else:  # timed out and aborted: the shell is gone
            self._drop(shell)
        return done

    def _restart(self, dead: RemoteShell) -> RemoteShell:
        """The one replacement of a shell that died; BackendError if none can be started."""
        try:
            return self._take()
        except BackendError as exc:
            why = dead.errors()
            raise BackendError(f"{exc}{f' (the shell before: {why})' if why else ''}") from exc

    def _file_exchange(self, script: str, what: str) -> Exchange:
        done, lost = self._exchange(script, next(self._seq), TRANSFER_TIMEOUT, RAW_CAP, kill_on_timeout=False)
        if done.timed_out:
            raise BackendError(f"ssh {self.spec.destination}: no answer within {TRANSFER_TIMEOUT:.0f}s {what}")
        if lost is not None:
            raise BackendError(f"ssh {self.spec.destination}: the remote shell ended while {what} (ssh exit {lost})")
        return done

    def _control(self, script: str) -> None:
        """A short script (a kill) on an idle shell of the pool, else over a channel of its own."""
        shell = self._take_idle()
        if shell is None:
            self._quiet(script)
            return
        done = shell.exchange(script, seq=next(self._seq), timeout=15.0, cap=4096, kill=lambda: None)
        if not done.complete:
            self._drop(shell)
            self._quiet(script)
            return
        self._give_back(shell)

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


def from_spec(spec: SSHSpec, *, ctx: BackendContext) -> SSHBackend:
    return SSHBackend(spec, ctx)
