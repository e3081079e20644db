"""Record / replay of model turns as a YAML cassette.

A cassette is ``{version: 1, job: NAME, model: ..., turns: [ {content, tool_calls, finish_reason, usage} ]}``.
Replay answers each request with the next turn and never touches the network; every tool call
still runs for real. Recording writes the file after every turn (so a crash keeps what was
seen), redacted, mode 0600.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from runner.agent.types import LLM, Message
from runner.config import yamlio
from runner.errors import CassetteError, ConfigError

MAX_CASSETTE_BYTES = 64 * 1024 * 1024


def BadCassette(message: str) -> CassetteError:  # noqa: N802 - reads as the error it builds
    """The cassette given to ``--replay`` is missing or invalid: bad input, exit 2, before any run row."""
    error = CassetteError(message)
    error.exit_code = 2
    return error


def load_cassette(path: Path) -> list[Message]:
    if not path.exists():
        raise BadCassette(f"{path}: cassette not found")
    try:
        data = yamlio.load_file(path, limit=MAX_CASSETTE_BYTES)
    except ConfigError as exc:
        raise BadCassette(str(exc)) from None
    turns = data.get("turns") if isinstance(data, dict) else None
    if not isinstance(turns, list) or not turns:
        raise BadCassette(f"{path}: a cassette needs a non-empty 'turns:' list")
    out = []
    for i, turn in enumerate(turns, 1):
        if not isinstance(turn, dict):
            raise BadCassette(f"{path}: turn {i}: expected a mapping")
        try:
            out.append(Message.from_record(turn))
        except (KeyError, TypeError, ValueError) as exc:
            raise BadCassette(f"{path}: turn {i}: {exc}") from None
    return out


def check_record_path(path: Path) -> None:
    """``--record PATH`` must be writable: checked (by creating its folder and a probe file there)
    before the run row exists, so a bad path is exit 2 with nothing half-written."""
    if path.is_dir():
        raise BadCassette(f"--record {path}: is a folder; give a file name")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=path.parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise BadCassette(f"--record {path}: cannot write there: {exc.strerror or exc}") from None


class ReplayLLM:
    def __init__(self, path: Path):
        self.path = path
        self.turns = load_cassette(path)
        self.position = 0
        self.model = f"replay:{path.name}"

    def complete(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        *,
        timeout: float | None = None,
        max_tokens: int | None = None,
    ) -> Message:
        if self.position >= len(self.turns):
            raise CassetteError(
                f"{self.path}: the cassette has {len(self.turns)} turns and the run asked for turn "
                f"{self.position + 1}; re-record it with --record"
            )
        turn = self.turns[self.position]
        self.position += 1
        return turn


class RecordingLLM:
    def __init__(self, inner: LLM, path: Path, *, job: str, redact: Callable[[Any], Any]):
        self.inner = inner
        self.path = path
        self.job = job
        self.redact = redact
        self.turns: list[dict[str, Any]] = []
        self.model = inner.model

    def complete(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        *,
        timeout: float | None = None,
        max_tokens: int | None = None,
    ) -> Message:
        message = self.inner.complete(messages, tools, timeout=timeout, max_tokens=max_tokens)
        self.turns.append(self.redact(message.to_record()))
        self._write()
        return message

    def _write(self) -> None:
        doc = {"version": 1, "job": self.job, "model": self.model, "turns": self.turns}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            yaml.safe_dump(doc, fh, sort_keys=False, allow_unicode=True, width=100)
        os.replace(tmp, self.path)
