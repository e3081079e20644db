"""What a tool handler gets: the run's backend, its limits, its callbacks and the run's services.

``settings``, ``skills``, ``kanban``, ``delegate``, ``memory`` and ``checkpoints`` are None where
the run has no such thing (a test's bare context, a job without skills, a run outside a kanban
worker, a job without checkpoints); the tools that need them are not offered then.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from runner.backends.base import Backend
from runner.events import Emit, no_events
from runner.host.procs import Cut
from runner.safety.result import ApprovalResult, ApproveFn, ToolApproveFn, ToolCheck
from runner.safety.ssrf import WebPolicy

if TYPE_CHECKING:
    from runner.memory.write import Binding
    from runner.safety.control import ControlPlane
    from runner.settings import Settings
    from runner.skills.session import SkillSession
    from runner.tools.delegate import Delegator
    from runner.tools.kanban import KanbanTask

class Checkpoints(Protocol):
    """The run's workdir checkpoints (``runner.run.checkpoints.Checkpointer``): the loop calls
    ``before_mutation`` before the first call of a model turn that may change files; a failure
    to snapshot is the checkpointer's to record, never the run's end."""

    def before_mutation(self, step: int, tool: str) -> None: ...


def _deny_all(command: str) -> ApprovalResult:
    return ApprovalResult(False, "blocked: no approval policy is configured for this run")


def _deny_tools(check: ToolCheck) -> ApprovalResult:
    return ApprovalResult(False, "blocked: no approval policy is configured for this run")


@dataclass(frozen=True)
class ToolContext:
    backend: Backend
    run_id: str = ""
    job_name: str = ""
    allow_paths: tuple[str, ...] = ()
    approve: ApproveFn = _deny_all
    approve_tool: ToolApproveFn = _deny_tools  # MCP tools: the same gate, for calls that are not commands
    emit: Emit = no_events
    command_timeout: float = 300.0
    output_chars: int = 16_000
    deadline: float | None = None  # time.monotonic() value when the run must end
    settings: Settings | None = None  # the runner's settings (store, jobs, config)
    skills: SkillSession | None = None  # the run's skills session (skill_view, skill_manage)
    kanban: KanbanTask | None = None  # the task a kanban worker holds (the kanban tools act on it)
    control: ControlPlane | None = None  # the runner's control files: the file tools refuse them
    web: WebPolicy = WebPolicy()  # the job's ``web:`` key: where web_fetch may connect
    delegate: Delegator | None = None  # runs subagents (delegate_task); None where delegating is not allowed
    memory: Binding | None = None  # the run's notebook (the memory tool); None: ``memory: off`` or no run
    cut: Cut | None = None  # the run's cut: an MCP call waited for is given up once it is set
    checkpoints: Checkpoints | None = None  # snapshots of the workdir before a turn changes it; None: off
    step_key: str = ""  # the idempotency key of the call being run (``RUNNER_STEP_KEY``: run:turn.call)

    def step_env(self) -> dict[str, str] | None:
        """The variables a command of this call gets besides the run's: ``RUNNER_STEP_KEY``."""
        return {"RUNNER_STEP_KEY": self.step_key} if self.step_key else None

    @property
    def workdir(self) -> str:
        return self.backend.workdir

    def time_left(self, wanted: float) -> float:
        if self.deadline is None:
            return wanted
        return max(1.0, min(wanted, self.deadline - time.monotonic()))
