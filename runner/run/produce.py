"""The "produce output" step of a run: one ``Producer`` per kind of job.

A script-only job (``agent: false``) produces its pre_run's stdout; an agent job produces the
model's final answer (``runner.run.agent_output``). The run around them is the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from runner.config.schedules import format_duration
from runner.run.prerun import PreRunResult, failure_text
from runner.run.request import RunScope
from runner.silent import is_silent
from runner.statuses import RunStatus
from runner.store.ledger import Reason

if TYPE_CHECKING:
    from runner.agent.loop import SideAccount, Steering
    from runner.agent.tracing import Tracer
    from runner.backends.base import Backend
    from runner.host.procs import Cut
    from runner.run.budget import BudgetPlan
    from runner.run.journal import Journal
    from runner.safety.approval import Gate
    from runner.safety.control import ControlPlane
    from runner.safety.redact import Redactor


@dataclass(frozen=True)
class Produced:
    """What the produce step ended with; ``silent`` means: keep the output, deliver nothing."""

    status: RunStatus
    output: str = ""
    reason: str | None = None
    error: str | None = None
    silent: bool = False


class Budgeted(Protocol):
    """The one member of a run's preparation (``runner.run.prepare.Prepared``) a producer reads."""

    @property
    def budget(self) -> BudgetPlan | None: ...


class RunView(RunScope, Protocol):
    """What a producer reads and calls of its run, beyond ``RunScope`` (``runner.run.execute.Run``
    has these members; a producer never imports it)."""

    @property
    def pre(self) -> PreRunResult | None: ...
    @property
    def prepared(self) -> Budgeted: ...
    @property
    def redactor(self) -> Redactor: ...
    @property
    def tracer(self) -> Tracer: ...
    @property
    def control(self) -> ControlPlane | None: ...
    @property
    def backend(self) -> Backend: ...
    @property
    def gate(self) -> Gate: ...
    @property
    def side_calls(self) -> SideAccount: ...  # the judge's replies, charged to the loop running
    @property
    def loop_deadline(self) -> float: ...
    @property
    def cut(self) -> Cut: ...  # set when the run must end its current step now (cancelled, declared lost)
    @property
    def inbox(self) -> Steering: ...  # messages sent to the run (``runner runs say``), for the loop to take
    @property
    def variables(self) -> dict[str, Any]: ...
    @property
    def journal(self) -> Journal: ...  # the run's journal of completed steps (replayed when it resumes)
    def record_model(self, model: str) -> None: ...
    def save_transcript(self, messages: list[dict[str, Any]]) -> Path: ...


class Producer(Protocol):
    #: a model steers the run, so its end is checked for tampering with the control files (a
    #: script-only job runs the operator's own code: an operator editing jobs.yaml meanwhile is no tamper)
    steered: bool

    def produce(self, run: RunView) -> Produced:
        """Make the run's output; the run writes and delivers it and records the status."""
        ...


def pre_run_timed_out(timeout: float) -> Produced:
    """The run's own ``timeout:`` ran out while its pre_run was going (the run stopped it)."""

    error = f"the job's timeout of {format_duration(timeout)} was reached during pre_run; the run stopped it"
    return Produced(RunStatus.TIMED_OUT, reason="timeout", error=error)


def pre_run_failed(pre: PreRunResult, redact: Redactor) -> Produced:
    """The pre_run failed (a non-zero exit, or past ``pre_run_timeout``): the run fails, reason
    ``pre_run``, its error naming how and the end of the script's stderr (redacted)."""
    return Produced(RunStatus.FAILED, reason=Reason.PRE_RUN, error=redact(failure_text(pre)))


@dataclass(frozen=True)
class ScriptOutput:
    """``agent: false``: the pre_run's stdout is the output; a non-zero exit fails the run; empty or
    ``[SILENT]`` is silent (``runner.silent``)."""

    steered = False

    def produce(self, run: RunView) -> Produced:
        pre = run.pre
        if run.req.stop.is_set():  # a first SIGTERM/Ctrl-C let the script finish; the run was still interrupted
            return Produced(RunStatus.INTERRUPTED, reason="interrupted", error="interrupted by a signal")
        if pre is not None and pre.failed:
            return pre_run_failed(pre, run.redactor)
        output = pre.stdout if pre is not None else ""
        return Produced(RunStatus.SUCCEEDED, output, silent=is_silent(output) or not output.strip())
