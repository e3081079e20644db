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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

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
    secret_values: tuple[str, ...] = ()
    output_cap: int = DEFAULT_OUTPUT_CAP


@runtime_checkable
class Backend(Protocol):
    """Anything with these methods is a backend; nothing needs to inherit."""

    #: the job's working directory as seen inside the backend (``/workspace`` in docker)
    workdir: str

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


_MARKER_TEMPLATE = r"\n?__RUNNER_CWD_{nonce}__(?P<cwd>[^\n]*)\n?$"


def split_marker(output: str, nonce: str) -> tuple[str, str | None]:
    """Remove the cwd marker from the end of ``output``; return (output, cwd or None)."""
    match = re.search(_MARKER_TEMPLATE.format(nonce=re.escape(nonce)), output)
    if not match:
        return output, None
    return output[: match.start()], match.group("cwd") or None


SECRET_NAME = re.compile(r"(API_KEY|APIKEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?|PRIVATE_KEY)$", re.I)


def scrub_env(
    environ: Mapping[str, str], *, passthrough: Sequence[str] = (), secret_values: Sequence[str] = ()
) -> dict[str, str]:
    """Copy of ``environ`` without credentials, except names listed in ``passthrough``."""
    keep = set(passthrough)
    values = {v for v in secret_values if v}
    out: dict[str, str] = {}
    for name, value in environ.items():
        if name not in keep and (SECRET_NAME.search(name) or name.startswith("RUNNER_") or value in values):
            continue
        out[name] = value
    return out


@dataclass
class CwdState:
    """The working directory a run's commands share."""

    cwd: str
    history: list[str] = field(default_factory=list)

    def update(self, new: str | None) -> None:
        if new and new != self.cwd:
            self.history.append(self.cwd)
            self.cwd = new


def default_shell() -> str:
    for candidate in ("/bin/bash", "/usr/bin/bash", "/bin/sh"):
        if os.path.exists(candidate):
            return candidate
    return "sh"
