"""Where the chat client gets its API key: the ``KeySource`` seam.

The client asks ``current()`` before each request and reports the outcome. A source answers a
failure (its HTTP status, headers, body and, from the provider's profile, its ``ErrorKind``)
with an ``Action``: ``ROTATE`` (try again now with another key; the client's retry
budget is not used), ``TRANSIENT`` (retry with backoff, counted), or ``FAIL``. The credential
pool (runner/agent/credentials.py) is a KeySource shared across processes; ``StaticKeys`` is the
simple one for a single key.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from runner.agent.profiles import ErrorKind
from runner.safety.redact import fingerprint


class Action(enum.Enum):
    ROTATE = "rotate"
    TRANSIENT = "transient"
    FAIL = "fail"


@dataclass(frozen=True)
class Credential:
    label: str
    value: str

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.value)

    def __repr__(self) -> str:  # never show the value
        return f"Credential({self.label}, {self.fingerprint})"


class KeySource(Protocol):
    def current(self) -> Credential | None: ...

    def succeeded(self, cred: Credential | None) -> None: ...

    def failed(
        self, cred: Credential | None, status: int, headers: Mapping[str, str], body: str, *, kind: ErrorKind | None = None
    ) -> Action: ...

    def values(self) -> list[str]: ...


class StaticKeys:
    """One key (or none, for local servers that need no auth); rate limits are retried."""

    def __init__(self, cred: Credential | None):
        self.cred = cred

    def current(self) -> Credential | None:
        return self.cred

    def succeeded(self, cred: Credential | None) -> None:
        return None

    def failed(
        self, cred: Credential | None, status: int, headers: Mapping[str, str], body: str, *, kind: ErrorKind | None = None
    ) -> Action:
        limited = kind is ErrorKind.RATE_LIMIT if kind is not None else status == 429
        return Action.TRANSIENT if limited else Action.FAIL

    def values(self) -> list[str]:
        return [self.cred.value] if self.cred else []
