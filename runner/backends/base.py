"""The backend protocol and the pieces every backend shares.

A backend is "a box to run shell commands in". Every implementation gives the same
semantics (see README "Backends"): a fresh shell per command, the working directory carried
over between commands of one run, environment not carried over, stdin closed, stdout and
stderr combined, output capped with head and tail kept, invalid UTF-8 replaced, and on
timeout the whole process tree killed with exit code 124.
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from runner.host.procs import Cut, wait_or_cut

if TYPE_CHECKING:
    from runner.backends.sandbox import Plan

DEFAULT_OUTPUT_CAP = 64 * 1024  # bytes of combined output kept per command
TIMEOUT_EXIT = 124


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    output: str
    timed_out: bool
    duration_s: float
    cwd: str


@dataclass(frozen=True)
class BackendContext:
    """What a backend needs to know about the run it serves."""

    workdir: Path
    home: Path
    run_id: str | None = None
    job: str | None = None
    env_passthrough: tuple[str, ...] = ()
    #: variables every command of the run gets (the run's id and job, a kanban task's id and fence)
    env: Mapping[str, str] = field(default_factory=dict)
    output_cap: int = DEFAULT_OUTPUT_CAP
    #: the runner's control files and folders inside the workdir (Docker mounts them read-only)
    protected: tuple[Path, ...] = ()
    #: the local backend runs everything in this sandbox (None: on the host as the runner's user)
    sandbox: Plan | None = None
    #: the run's cut: once set, the command running is ended as on a timeout (``runner.host.procs.Cut``)
    cut: Cut | None = None


@runtime_checkable
class Backend(Protocol):
    """Anything with these methods is a backend; nothing needs to inherit."""

    #: the job's working directory as seen inside the backend (``/workspace`` in docker)
    workdir: str
    #: True when paths inside the backend are paths on this machine (so host file APIs and
    #: ``os.path.realpath`` see the same files); False for docker and ssh
    is_local: bool

    def run(
        self,
        command: str,
        *,
        cwd: str | None = None,
        timeout: float,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult: ...

    def read_file(self, path: str) -> bytes: ...

    def write_file(self, path: str, data: bytes) -> None: ...

    def close(self) -> None: ...

    def __enter__(self) -> Backend: ...

    def __exit__(self, *exc: object) -> None: ...


class OutputBuffer:
    """Collects a byte stream, keeping at most ``cap`` bytes: the head and the tail."""

    def __init__(self, cap: int = DEFAULT_OUTPUT_CAP):
        self.cap = max(cap, 64)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        half = self.cap // 2
        room = half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > half:
                del self.tail[: len(self.tail) - half]

    def text(self) -> str:
        kept = len(self.head) + len(self.tail)
        if self.total <= kept:
            return decode(bytes(self.head + self.tail))
        cut = self.total - kept
        marker = f"\n[... {cut} bytes of output cut; kept first {len(self.head)} and last {len(self.tail)} ...]\n"
        return decode(bytes(self.head)) + marker + decode(bytes(self.tail))


def decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def truncate_text(text: str, cap: int) -> str:
    """Head-and-tail truncation of an already decoded string (cap in characters)."""
    if len(text) <= cap:
        return text
    half = cap // 2
    cut = len(text) - 2 * half
    return f"{text[:half]}\n[... {cut} characters cut ...]\n{text[-half:]}"


def new_nonce() -> str:
    return secrets.token_hex(6)


def wrap_command(command: str, cwd: str, nonce: str) -> str:
    """Shell text that runs ``command`` in ``cwd`` and reports the final cwd after a marker.

    The marker goes to stdout in an EXIT trap, so ``cd`` inside the command carries over
    to the next command of the run even when the command ends with ``exit``.
    """
    trap = f"printf '\\n__RUNNER_CWD_{nonce}__%s\\n' \"$PWD\""
    return f"trap {shlex.quote(trap)} EXIT\ncd {shlex.quote(cwd)} || exit 1\n{command}\n"


_MARKER = re.compile(r"\n?__RUNNER_CWD_(?P<nonce>[0-9a-f]+)__(?P<cwd>[^\n]*)\n?$")


def split_marker(output: str, nonce: str) -> tuple[str, str | None]:
    """Remove the cwd marker from the end of ``output``; return (output, cwd or None). The marker
    is the output's last line (the trap prints it on a line of its own at exit) and must carry
    this command's ``nonce``; one pattern serves every nonce, so no command compiles a regex."""
    match = _MARKER.search(output)
    if not match or match.group("nonce") != nonce:
        return output, None
    return output[: match.start()], match.group("cwd") or None


#: what a command inherits of the runner's environment, whatever else is set there (an allow list:
#: a secret under a name nobody thought of stays out); the job's ``env_passthrough`` adds names
ALLOWED_ENV = frozenset({"PATH", "HOME", "LANG", "LANGUAGE", "TERM", "TZ", "USER", "LOGNAME", "TMPDIR"})


def command_env(environ: Mapping[str, str], *, passthrough: Sequence[str] = ()) -> dict[str, str]:
    """The part of ``environ`` a command sees: ``ALLOWED_ENV``, the locale (``LC_*``) and the
    names in ``passthrough`` (the job's own choice, secrets included)."""
    keep = ALLOWED_ENV.union(passthrough)
    return {name: value for name, value in environ.items() if name in keep or name.startswith("LC_")}


@dataclass
class CwdState:
    """The working directory a run's commands share."""

    cwd: str

    def update(self, new: str | None) -> None:
        if new:
            self.cwd = new

    def absolute(self, path: str) -> str:
        """``path`` made absolute against the current directory (POSIX paths in the backend)."""
        return path if path.startswith("/") else f"{self.cwd.rstrip('/')}/{path}"

    def resolve(self, cwd: str | None) -> str:
        """The directory a command runs in: the current one, or ``cwd`` relative to it."""
        return self.cwd if cwd is None else self.absolute(cwd)


def default_shell() -> str:
    for candidate in ("/bin/bash", "/usr/bin/bash", "/bin/sh"):
        if os.path.exists(candidate):
            return candidate
    return "sh"


# -- remote command wrapper (docker exec, ssh) ---------------------------------------------
# A remote command runs as: a POSIX sh wrapper -> (setsid) the fresh shell running the
# ``wrap_command`` script. The inner shell leads its own process group and writes its pid to
# ``pidfile``, so a timeout can kill the whole tree with one ``kill -9 -PGID`` sent through a
# second channel. When the inner shell exits, the wrapper prints a trailer with the exit code
# and, if anything of the group is still running (``sleep 1000 &``), the group id, so the
# backend knows the command is done even while a background child keeps the stream open.

_TRAILER = rb"\n__RUNNER_EXIT_%s__(?P<code>-?\d+):(?P<group>\d+)\n"


def pidfile_for(nonce: str, seq: int) -> str:
    return f"/tmp/.runner-{nonce}-{seq}.pid"


def wrap_remote(script: str, *, pidfile: str, nonce: str) -> str:
    """POSIX sh text that runs ``script`` (from ``wrap_command``) as described above."""
    q = shlex.quote
    inner = f"{{ echo $$ > {q(pidfile)}; }} 2>/dev/null\n{script}"
    return (
        "if command -v bash >/dev/null 2>&1; then s=bash; else s=/bin/sh; fi\n"
        "if command -v setsid >/dev/null 2>&1; then l=setsid; else l=; fi\n"
        f'$l "$s" -c {q(inner)} </dev/null 2>&1\n'
        "c=$?\ng=0\n"
        f"if read -r p < {q(pidfile)} 2>/dev/null; then kill -0 -$p 2>/dev/null && g=$p; fi\n"
        f"rm -f {q(pidfile)} 2>/dev/null\n"
        f'printf \'\\n__RUNNER_EXIT_{nonce}__%d:%d\\n\' "$c" "$g"\n'
        'exit "$c"\n'
    )


def kill_group_script(pidfile: str) -> str:
    """Shell text that kills the process group whose leader wrote ``pidfile``."""
    return f"read -r p < {shlex.quote(pidfile)} && kill -9 -$p 2>/dev/null || kill -9 $p 2>/dev/null; true"


def kill_groups_script(groups: Sequence[int]) -> str:
    """Shell text that kills the given process groups (leftover background jobs)."""
    return "".join(f"kill -9 -{int(g)} 2>/dev/null; " for g in groups) + "true"


class MarkedStream:
    """Output of a ``wrap_remote`` command: feeds an OutputBuffer until the trailer arrives."""

    def __init__(self, nonce: str, cap: int):
        self.buffer = OutputBuffer(cap)
        self.exit_code: int | None = None
        self.group = 0  # process group still alive after the command, 0 if none
        self._trailer = re.compile(_TRAILER % re.escape(nonce).encode())
        self._keep = 64 + len(nonce)  # longer than any trailer, so a split one is found
        self._pending = b""

    @property
    def complete(self) -> bool:
        return self.exit_code is not None

    def feed(self, chunk: bytes) -> None:
        if self.complete:
            return
        data = self._pending + chunk
        match = self._trailer.search(data)
        if match:
            self.buffer.feed(data[: match.start()])
            self.exit_code = int(match.group("code"))
            self.group = int(match.group("group"))
            self._pending = b""
            return
        cut = max(0, len(data) - self._keep)
        self.buffer.feed(data[:cut])
        self._pending = data[cut:]

    def finish(self) -> None:
        self.buffer.feed(self._pending)
        self._pending = b""


class StreamPump:
    """Reads a command's output stream in a thread; ``wait`` returns once it is complete."""

    def __init__(self, chunks: Iterable[bytes], nonce: str, cap: int):
        self.stream = MarkedStream(nonce, cap)
        self.error: BaseException | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(chunks,), daemon=True)
        self._thread.start()

    def _read(self, chunks: Iterable[bytes]) -> None:
        try:
            for chunk in chunks:
                self.stream.feed(chunk)
                if self.stream.complete:
                    break
        except Exception as exc:  # the stream was closed under us, or the transport died
            self.error = exc
        finally:
            self.stream.finish()
            self._done.set()

    def wait(self, timeout: float | None) -> bool:
        return self._done.wait(timeout)


def finish_or_kill(
    pump: StreamPump,
    timeout: float,
    *,
    kill: Callable[[], None],
    abort: Callable[[], None],
    kill_for: float = 10.0,
    cut: Cut | None = None,
) -> bool:
    """Wait for a remote command; on timeout, or once ``cut`` is set, kill its group. Returns True
    if it timed out (or was cut).

    ``kill`` sends the group kill through a second channel. It can be slow or fail while a
    fork bomb holds every pid, so it is retried from a helper thread and the wait stays
    bounded: after ``kill_for`` seconds ``abort`` drops our end of the stream regardless.
    """
    if wait_or_cut(pump.wait, timeout, cut):
        return False
    deadline = time.monotonic() + kill_for

    def keep_killing() -> None:
        while time.monotonic() < deadline:
            try:
                kill()
            except Exception:  # noqa: BLE001 - retried until the deadline
                pass
            if pump.wait(0.3):
                return

    threading.Thread(target=keep_killing, daemon=True).start()
    pump.wait(kill_for)
    abort()
    pump.wait(2.0)
    return True


# -- file operations through a shell (docker exec, ssh) -------------------------------------
#: ``sh -c READ_SCRIPT sh PATH`` prints the file
READ_SCRIPT = 'exec cat -- "$1"'
#: ``sh -c WRITE_SCRIPT sh PATH SUFFIX`` writes stdin to PATH via a temporary sibling
WRITE_SCRIPT = (
    'd=$(dirname -- "$1") && mkdir -p -- "$d" && cat > "$1.$2" && mv -f -- "$1.$2" "$1" '
    '|| { r=$?; rm -f -- "$1.$2"; exit "$r"; }'
)

_FILE_ERRORS: tuple[tuple[str, type[OSError]], ...] = (
    ("no such file", FileNotFoundError),
    ("is a directory", IsADirectoryError),
    ("not a directory", NotADirectoryError),
    ("permission denied", PermissionError),
)


def file_error(path: str, message: bytes | str) -> OSError:
    """The builtin OSError a local file operation would raise, from a remote tool's message."""
    text = (decode(message) if isinstance(message, bytes) else message).strip() or "failed"
    lowered = text.lower()
    for needle, cls in _FILE_ERRORS:
        if needle in lowered:
            return cls(f"{path}: {text}")
    return OSError(f"{path}: {text}")


def make_result(
    pump: StreamPump,
    nonce: str,
    cwd: CwdState,
    lock: threading.Lock,
    exit_code: int | None,
    timed_out: bool,
    started: float,
) -> ExecResult:
    """The ExecResult of a ``wrap_remote`` command; a finished command moves the shared cwd."""
    text, new_cwd = split_marker(pump.stream.buffer.text(), nonce)
    with lock:
        if not timed_out:
            cwd.update(new_cwd)
        here = cwd.cwd
    code = TIMEOUT_EXIT if timed_out else exit_code
    return ExecResult(
        exit_code=-1 if code is None else code,
        output=text,
        timed_out=timed_out,
        duration_s=time.monotonic() - started,
        cwd=here,
    )
