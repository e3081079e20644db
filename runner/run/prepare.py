"""Everything about a run that can be wrong before its ledger row exists.

Template syntax, a dry render with placeholder run values, the model choice (unknown provider,
missing key, unreadable cassette): each is exit 2 with nothing written. The result, a frozen
``Prepared``, is what the run needs from that work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from runner.backends.sandbox import problem
from runner.clock import utcnow
from runner.errors import UsageError
from runner.run.agent_output import AgentOutput
from runner.run.budget import plan
from runner.run.model_source import Providers, resolve
from runner.run.produce import Producer, ScriptOutput
from runner.run.prompt import check_syntax, job_template, render, variables
from runner.run.request import RunRequest
from runner.settings import Settings

if TYPE_CHECKING:
    from runner.run.budget import BudgetPlan


@dataclass(frozen=True)
class Prepared:
    producer: Producer  # makes the run's output: the pre_run's stdout or the agent's answer
    secrets: tuple[str, ...] = ()  # key values: masked everywhere, kept out of the backend's env
    budget: BudgetPlan | None = None  # live providers only: what the run reserves before its first model call


def prepare(settings: Settings, req: RunRequest) -> Prepared:
    """Check the job's template and resolve its models; raises a RunnerError (exit 2) when either is bad."""
    job = req.job
    if not job.spec.agent:
        return Prepared(ScriptOutput())
    if job.sandboxed:
        check_sandbox(job.name)

    check_syntax(job)
    source, name = job_template(job)
    placeholder = {"id": "dry-run", "slot": None, "trigger": str(req.trigger)}
    dry = variables(
        job,
        now=utcnow(),
        run=placeholder,
        vars_override=dict(req.vars_override),
        pre_run={"stdout": "", "exit_code": 0, "stderr": ""},
    )
    render(source, dry, name=name, base=job.base_dir)  # a missing variable is exit 2, before any row
    models = resolve(settings, job, req.model)
    budget = None
    if isinstance(models, Providers):  # a cassette or a caller's own model costs nothing

        budget = plan(settings.config, job, models.provider_names)
    return Prepared(AgentOutput(source, name, models), models.secrets, budget)


def check_sandbox(job: str) -> None:
    """An agent job on the local backend runs only in its sandbox: none on this machine is bad
    input (exit 2), with the package to install or the key that turns the sandbox off."""

    why = problem()
    if why is not None:
        raise UsageError(
            f"job {job}: {why}; or set `sandbox: off` on the job to run its commands as the runner's own user"
        )
