"""The board's values: tasks, claims, reclaims, its errors and the retry backoff."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from runner.errors import RunnerError, UsageError

BACKOFF_CAP_S = 3600.0


class TaskNotFound(UsageError):
    """No task with that id."""

    reason = "tasknotfound"


class FenceError(RunnerError):
    """A write carried a stale fence: this worker's claim was reclaimed or the task ended."""

    reason = "fence"

    def __init__(self, task_id: int, fence: int, current: int | None, status: str | None, action: str):
        if current is None or status is None:
            why = f"this worker's claim (fence {fence}) was reclaimed"
        elif current == fence:
            why = f"the task is no longer running (it is {status})"
        else:
            why = f"this worker holds fence {fence} but the task is {status} with fence {current} (claimed again)"
        super().__init__(f"task {task_id}: {action} refused: {why}")
        self.task_id, self.fence, self.current, self.status, self.action = task_id, fence, current, status, action


class AlreadyTaken(FenceError):
    """Another delivery of the same attempt took it first (a remote worker's ``take``)."""

    reason = "alreadytaken"

    def __init__(self, task_id: int, fence: int, current: int | None, status: str | None, action: str):
        super().__init__(task_id, fence, current, status, action)
        self.args = (f"task {task_id}: {action} refused: another worker already took the attempt under fence {fence}",)


@dataclass(frozen=True)
class Task:
    id: int
    title: str
    body: str
    status: str
    priority: int
    job: str | None
    attempts: int
    max_attempts: int
    lease_owner: str | None
    lease_expires: str | None
    fence: int
    worker_pid: int | None
    worker_pid_start: str | None
    host: str | None
    not_before: str | None
    result: str | None
    error: str | None
    reason: str | None
    created_by: str | None
    created_at: str
    updated_at: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Claim:
    task_id: int
    fence: int
    owner: str
    lease_expires: str
    attempt: int


@dataclass(frozen=True)
class AttemptState:
    """A task as a dispatcher following its remote attempts sees it."""

    task_id: int
    fence: int
    status: str
    taken: bool  # a worker took the attempt (``worker_pid`` set)

    def running_under(self, fence: int) -> bool:
        return self.status == "running" and self.fence == fence


@dataclass(frozen=True)
class Reclaimed:
    """A running task whose lease ran out; ``status`` is where the failed attempt sent it."""

    task_id: int
    fence: int
    owner: str | None
    pid: int | None
    pid_start: str | None
    host: str | None
    status: str

    @classmethod
    def from_row(cls, row: Any, status: str) -> Reclaimed:
        return cls(
            row["id"], row["fence"], row["lease_owner"], row["worker_pid"], row["worker_pid_start"], row["host"], status
        )


def backoff_seconds(base: float, attempts: int) -> float:
    """Delay before a failed task may be claimed again: base, 2*base, 4*base ... capped at 1 h."""
    if base <= 0:
        return 0.0
    return float(min(base * 2 ** max(attempts - 1, 0), BACKOFF_CAP_S))
