"""What a tool handler gets: the run's backend, its limits and its callbacks."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from backends.base import Backend
from runner.safety.result import ApprovalResult, ApproveFn

EmitFn = Callable[[str, dict[str, Any]], None]


def _deny_all(command: str) -> ApprovalResult:
    return ApprovalResult(False, "blocked: no approval policy is configured for this run")


def _no_events(kind: str, payload: dict[str, Any]) -> None:
    return None


@dataclass(frozen=True)
class ToolContext:
    backend: Backend
    run_id: str = ""
    job_name: str = ""
    allow_paths: tuple[str, ...] = ()
    approve: ApproveFn = _deny_all
    emit: EmitFn = _no_events
    command_timeout: float = 300.0
    output_chars: int = 16_000
    deadline: float | None = None  # time.monotonic() value when the run must end
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def workdir(self) -> str:
        return self.backend.workdir

    def time_left(self, wanted: float) -> float:
        if self.deadline is None:
            return wanted
        return max(1.0, min(wanted, self.deadline - time.monotonic()))
