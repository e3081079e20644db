"""What a caller asks of one run (``RunRequest``) and what it gets back (``RunOutcome``).

Where the model's answers come from is one value, a ``ModelSource``: the configured providers
(``Live``), a cassette (``Replay``), the providers while writing a cassette (``Record``) or a
model seam the caller built (``Given``, for tests and embedders). What a kanban worker adds to
a run is one value too, ``TaskHooks``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from runner.agent.types import LLM
from runner.config.jobfile import Job
from runner.events import Emit
from runner.statuses import RunStatus, Trigger

if TYPE_CHECKING:
    from runner.run.cancel import CancelWatcher
    from runner.settings import Settings
    from runner.store.runs import Recorder
    from runner.tools.kanban import KanbanTask


@dataclass(frozen=True)
class Live:
    """The job's ``model:`` list through config.yaml's providers."""


@dataclass(frozen=True)
class Replay:
    """Answers from a cassette file; no provider is needed."""

    path: Path


@dataclass(frozen=True)
class Record:
    """The providers, as ``Live``, with every answer written to a cassette file."""

    path: Path


@dataclass(frozen=True)
class Given:
    """A model seam the caller built (tests, embedders)."""

    llm: LLM


ModelSource = Live | Replay | Record | Given


@dataclass(frozen=True)
class TaskHooks:
    """What a kanban worker adds to the run of a task's job."""

    task_id: str  # stored on the run row
    session: KanbanTask  # the task the kanban tools act on
    prompt: str = ""  # appended to the rendered prompt (the task's title, body, comments)
    # Called when the model gives its final answer: a returned text is sent once as a user turn;
    # still text after that and the run fails with reason "unfinished" (kanban: end the task).
    follow_up: Callable[[], str | None] | None = None
    fence: int | None = None  # the claim's fence: HERMES_KANBAN_FENCE for the run's commands
    # an attempt that resumes a lost one: told to the model before its first live request (which
    # attempt this is, why the last one ended, the comments it was not given)
    resume_note: str | None = None

    def env(self) -> dict[str, str]:
        """What the run's commands learn of their task (Hermes's names)."""
        out = {"HERMES_KANBAN_TASK": self.task_id}
        if self.fence is not None:
            out["HERMES_KANBAN_FENCE"] = str(self.fence)
        return out


@dataclass(frozen=True)
class Handoff:
    """When serve's worker process took its queued run (right after the fork), and how long the run
    had waited for a slot: recorded with the run's start, so the ledger tells queue wait from start
    overhead."""

    dispatched_at: datetime
    waited_s: float | None = None


@dataclass(frozen=True)
class RunRequest:
    job: Job
    trigger: Trigger = Trigger.MANUAL
    run_id: str | None = None  # an existing queued row (scheduler) to start
    slot: datetime | None = None
    vars_override: Mapping[str, str] = field(default_factory=dict)
    model: ModelSource = Live()
    stdout: TextIO | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    workdir: Path | None = None
    interactive: bool = False  # a person at a TTY may answer `approvals: manual` prompts
    task: TaskHooks | None = None
    deliver: bool = True  # False (``run-job --no-deliver``): no delivery sinks and no alerts
    handoff: Handoff | None = None  # a queued row started by serve's worker
    # the files jobs.yaml refers to, when the caller has them (serve); None: the run reads jobs.yaml
    control_inputs: tuple[str, ...] | None = None
    progress: Emit | None = None  # each recorded event, redacted (a TTY's progress)
    review: bool = False  # ``run-job --review``: a skill review after this run, a replayed one too
    # a cancel watcher on the run's store that the caller keeps across runs (serve's reusable
    # worker); None: the run starts a watcher of its own and ends it with the run
    cancels: CancelWatcher | None = None
    # the id of the attempt this run resumes (a new attempt of the same run: ``parent_run`` names
    # the first, ``attempt`` is one more): ``runner runs resume`` (whatever the job's ``resume:``),
    # or a kanban task's next attempt after its worker was lost (``resume: auto``)
    resumes: str | None = None


EXIT_CODES = {RunStatus.SUCCEEDED: 0, RunStatus.SKIPPED: 0, RunStatus.INTERRUPTED: 130}


@dataclass(frozen=True)
class RunOutcome:
    run_id: str
    status: RunStatus
    output: str = ""
    reason: str | None = None
    error: str | None = None
    output_path: str | None = None
    silent: bool = False
    delivery: tuple[dict[str, Any], ...] = ()  # one {sink, ok, detail} per sink, labels masked

    @property
    def delivery_failed(self) -> list[dict[str, Any]]:
        return [d for d in self.delivery if not d["ok"]]

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.status, 1)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.run_id,  # a run's own id is ``id`` in every --json output (docs/commands.md#json-output)
            "status": str(self.status),
            "reason": self.reason,
            "error": self.error,
            "output_path": self.output_path,
            "silent": self.silent,
            "delivery": list(self.delivery),
            "delivery_failed": bool(self.delivery_failed),
            "output": self.output,
        }


class RunScope(Protocol):
    """What the steps inside a run (its toolbox, its skill review) read of it: not the whole run
    (``runner.run.execute.Run``, which has these members)."""

    @property
    def run_id(self) -> str: ...
    @property
    def job(self) -> Job: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def req(self) -> RunRequest: ...
    @property
    def emit(self) -> Recorder: ...
    @property
    def deadline(self) -> float: ...  # time.monotonic() at which the run's timeout ends
