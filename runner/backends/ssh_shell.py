"""The persistent remote shell of the SSH backend: one shell per ssh session, fed commands through
a framed protocol on its stdin, so a command costs a fork on the host, not a session whose login
shell sources ``~/.bashrc``.

Protocol (host -> shell, on the shell's stdin), one command at a time::

    TOKEN SEQ            a fresh random token per command, the command's sequence number
    ...script lines...   the shell text (from ``wrap_command``), any number of lines
    TOKEN                the end of the script

Shell -> host, on its stdout::

    __RUNNER_BEGIN_TOKEN__            the script was read whole; the command is starting
    ...output of the command...       stdout and stderr combined, streamed as it comes
    \\n__RUNNER_EXIT_TOKEN__CODE:GROUP  the exit trailer (``runner.backends.base.MarkedStream``)

The persistent shell is ``bash --norc --noprofile`` with job control on (``set -m``: every
background job leads a process group of its own, no tty needed), or ``/bin/sh`` on a host
without bash (then ``setsid`` makes the group). It starts each script as
``bash --norc --noprofile -c SCRIPT </dev/null 2>&1 &`` (``/bin/sh -c`` without bash; ``--norc``
because bash sources ``~/.bashrc`` even non-interactively when it sees ``SSH_CLIENT`` and
``SHLVL`` < 2, which it does below an ``exec``), writes ``SEQ PID`` (the pid is the group) to its
pidfile ``/tmp/.runner-NONCE-sN.pid`` for a timeout kill from another shell or channel, waits for
it and prints the trailer. So every command is a fresh child with the environment the session
started with (exports never carry over), its stdin is /dev/null, and the token it would have to
print to end its stream early is known only to the host and the shell's unexported variable.
Everything the shell prints before a command's begin line (a chatty ``.bashrc``, late output of
an escaped background job) is dropped. The shell's variables are named ``_rn_*``.
"""

from __future__ import annotations

import os
import re
import secrets
import select
import shlex
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from runner.backends.base import StreamPump, decode, finish_or_kill
from runner.errors import BackendError
from runner.host.procs import Cut

#: the output of a file read is kept whole (the stream's head is this big)
RAW_CAP = 1 << 62
#: a write_file whose script would be longer goes over its own channel (one argument <= 128 KiB)
MAX_INLINE_WRITE = 100_000
REAP_S = 2.0

_LOOP = r"""{probe}
_rn_f={pidfile}
trap 'rm -f "$_rn_f"' EXIT
printf '\n__RUNNER_READY_{nonce}__%s\n' "$PWD"
if [ -n "${{BASH_VERSION:-}}" ]; then
  set -m; _rn_b=1; _rn_l=; exec 2>/dev/null
else
  _rn_b=; if command -v setsid >/dev/null 2>&1; then _rn_l=setsid; else _rn_l=; fi
fi
while IFS= read -r _rn_h; do
  _rn_t=${{_rn_h%% *}}; _rn_n=${{_rn_h#* }}; _rn_x=; _rn_e=1
  while IFS= read -r _rn_y; do
    if [ "$_rn_y" = "$_rn_t" ]; then _rn_e=0; break; fi
    _rn_x="$_rn_x$_rn_y
"
  done
  [ "$_rn_e" = 0 ] || exit 0
  printf '__RUNNER_BEGIN_%s__\n' "$_rn_t"
  if [ -n "$_rn_b" ]; then bash --norc --noprofile -c "$_rn_x" </dev/null 2>&1 &
  else $_rn_l /bin/sh -c "$_rn_x" </dev/null 2>&1 &
  fi
  _rn_p=$!
  {{ echo "$_rn_n $_rn_p" > "$_rn_f"; }} 2>/dev/null
  wait "$_rn_p"; _rn_c=$?
  _rn_g=0; kill -0 -"$_rn_p" 2>/dev/null && _rn_g=$_rn_p
  printf '\n__RUNNER_EXIT_%s__%d:%d\n' "$_rn_t" "$_rn_c" "$_rn_g"
done
"""

#: prints the file named $1 whole; on failure prints only the error message and exits 1
#: (a readable regular file is the common case: one exec, no subshell)
READ_INLINE = (
    'if [ -f "$1" ] && [ -r "$1" ]; then exec cat -- "$1"; fi\n'
    '{ _e=$(cat -- "$1" 2>&1 >&3); } 3>&1 || { printf %s "$_e"; exit 1; }'
)


#: runs the loop (``$1``) in ``bash --norc --noprofile`` if the host has bash, else in ``/bin/sh``
_LAUNCH = (
    'if command -v bash >/dev/null 2>&1; then exec bash --norc --noprofile -c "$1" bash; fi\nexec /bin/sh -c "$1" sh'
)


def loop_script(nonce: str, probe: str, pidfile: str) -> str:
    """The shell text of the persistent shell: ``probe`` (a ``cd``) first, then the ready line and the loop."""
    return _LOOP.format(nonce=nonce, probe=probe, pidfile=shlex.quote(pidfile))


def launch_args(loop: str) -> tuple[str, str]:
    """``(script, arg)`` for ``sh -c script sh arg``: start ``loop`` in the persistent shell."""
    return _LAUNCH, loop


def shell_pidfile(nonce: str, shell: int) -> str:
    """Where shell number ``shell`` of a backend notes ``SEQ PID`` of the command it runs."""
    return f"/tmp/.runner-{nonce}-s{shell}.pid"


def kill_command_script(pidfile: str, seq: int, *, remove: bool = False) -> str:
    """Shell text that kills the process group of command ``seq``, if that is still the one in
    ``pidfile``; with ``remove``, the pidfile goes too (its shell is dead)."""
    script = (
        f'read -r s p < {shlex.quote(pidfile)} 2>/dev/null && [ "$s" = {int(seq)} ] && '
        '{ kill -9 -"$p" 2>/dev/null || kill -9 "$p" 2>/dev/null; }; '
    )
    return script + (f"rm -f {shlex.quote(pidfile)}" if remove else "true")


def with_args(script: str, *args: str) -> str:
    """``script`` with ``$1``, ``$2``... set to ``args``."""
    return f"set -- {' '.join(map(shlex.quote, args))}\n{script}\n"


def printf_literal(data: bytes) -> str:
    """A printf format (single-quoted shell word) that prints ``data`` exactly."""
    out = []
    for byte in data:
        if 32 <= byte < 127 and byte not in b"'\\%":
            out.append(chr(byte))
        elif byte == ord("%"):
            out.append("%%")
        else:
            out.append(f"\\{byte:03o}")
    return "'" + "".join(out) + "'"


def write_inline(data: bytes) -> str:
    """Shell text writing ``data`` to $1 via a temporary sibling ``$1.$2`` (any error message is the output)."""
    return (  # $1 is absolute; the folder by parameter expansion, mkdir only when missing: one exec (mv)
        'd=${1%/*}; d=${d:-/}; { [ -d "$d" ] || mkdir -p -- "$d"; } && '
        f'printf {printf_literal(data)} > "$1.$2" && mv -f -- "$1.$2" "$1" '
        '|| { r=$?; rm -f -- "$1.$2"; exit "$r"; }'
    )


class _Framed:
    """One command's output chunks: what the shell printed before its begin line is dropped."""

    def __init__(self, chunks: Iterator[bytes], token: str):
        self.started = False
        self._chunks = chunks
        self._marker = f"__RUNNER_BEGIN_{token}__\n".encode()

    def __iter__(self) -> Iterator[bytes]:
        pending = b""
        for chunk in self._chunks:
            if self.started:
                yield chunk
                continue
            data = pending + chunk
            at = data.find(self._marker)
            if at < 0:
                pending = data[-len(self._marker) :]
                continue
            self.started = True
            if rest := data[at + len(self._marker) :]:
                yield rest


@dataclass(frozen=True)
class Exchange:
    """How one framed command went: ``pump.stream`` holds its output and trailer."""

    pump: StreamPump
    started: bool
    timed_out: bool

    @property
    def complete(self) -> bool:
        return self.pump.stream.complete


class RemoteShell:
    """One ssh session running the persistent shell; one command at a time."""

    def __init__(self, argv: list[str], pidfile: str):
        self.pidfile = pidfile
        self._errors = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the session (errors() reads it)
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._errors)
        except OSError as exc:
            self._errors.close()
            raise BackendError(f"ssh: cannot start the ssh client: {exc}") from exc
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._stdin = self.proc.stdin
        self._fd = self.proc.stdout.fileno()
        self._write_lock = threading.Lock()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_ready(self, nonce: str, timeout: float) -> str | None:
        """The shell's cwd from its ready line; None if the session ended first."""
        marker = re.compile(rf"\n__RUNNER_READY_{nonce}__([^\n]*)\n".encode())
        deadline = time.monotonic() + timeout
        seen = b""
        while (left := deadline - time.monotonic()) > 0:
            if not select.select([self._fd], [], [], left)[0]:
                break
            chunk = os.read(self._fd, 65536)
            if not chunk:
                return None
            seen = (seen + chunk)[-65536:]
            if match := marker.search(seen):
                return decode(match.group(1))
        raise TimeoutError(f"no answer within {timeout:.0f}s")

    def exchange(
        self, script: str, *, seq: int, timeout: float, cap: int, kill: Callable[[], None], cut: Cut | None = None
    ) -> Exchange:
        """Send ``script``, stream its output until the trailer, the session's end, the timeout or the run's cut."""
        token = secrets.token_hex(8)
        framed = _Framed(self._chunks(), token)
        pump = StreamPump(iter(framed), token, cap)
        if not self._send(token, seq, script):
            self.kill()

        def abort() -> None:  # finish_or_kill aborts after every timeout; a finished command keeps its shell
            if not pump.stream.complete:
                self.kill()

        timed_out = finish_or_kill(pump, timeout, kill=kill, abort=abort, cut=cut)
        return Exchange(pump, framed.started, timed_out)

    def errors(self) -> str:
        """What ssh (or the remote shell) wrote to stderr, for error messages."""
        self._errors.seek(0)
        return decode(self._errors.read()).strip()

    def status(self) -> int | None:
        """The ssh client's exit status once the session is over (None if it will not end)."""
        try:
            return self.proc.wait(timeout=REAP_S)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        if self.alive:
            self.proc.kill()

    def close(self) -> None:
        """End the session: EOF ends the shell; a client still held open by a background job is killed."""
        self._close_input()
        if self.status() is None:
            self.proc.kill()
            self.proc.wait()
        self._release()

    def stop(self) -> None:
        """Like ``close`` without waiting: the client is terminated at once (``reap`` waits for it)."""
        self._close_input()
        if self.alive:
            self.proc.terminate()

    def reap(self) -> None:
        if self.status() is None:
            self.proc.kill()
            self.proc.wait()
        self._release()

    # -- helpers --------------------------------------------------------------------------
    def _chunks(self) -> Iterator[bytes]:
        while chunk := os.read(self._fd, 65536):
            yield chunk

    def _send(self, token: str, seq: int, script: str) -> bool:
        if not script.endswith("\n"):
            script += "\n"
        data = f"{token} {seq}\n{script}{token}\n".encode("utf-8", "surrogateescape")
        try:
            with self._write_lock:
                self._stdin.write(data)
                self._stdin.flush()
        except (OSError, ValueError):  # the session is gone (EPIPE) or was closed under us
            return False
        return True

    def _close_input(self) -> None:
        try:
            with self._write_lock:
                self._stdin.close()
        except OSError:  # the flush of nothing into a dead pipe: the session is over anyway
            pass

    def _release(self) -> None:
        if self.proc.stdout is not None:
            self.proc.stdout.close()
