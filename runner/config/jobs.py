"""jobs.yaml: the strict job schema, defaults merging and whole-file validation.

Every problem in the file is collected and reported at once as ``FILE: job NAME: field: message``.
``Job``, ``JobsFile`` and the checks beyond the schema live in ``runner.config.jobfile`` (no
pydantic there); they are re-exported here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, StrictBool, ValidationError, ValidationInfo, field_validator

from runner.backends.spec import BackendSpec, LocalSpec, parse_spec
from runner.backends.ssh_spec import SSHSpec
from runner.config import yamlio
from runner.config.jobfile import (
    JOB_NAME,
    TEMPLATE_SUFFIXES,
    Job,
    JobsFile,
    OwnNames,
    chain_cycles,
    check_context_from,
    check_job,
    context_key,
    inputs_of,
    job_inputs,
    looks_like_path,
    referenced_files,
)
from runner.config.model_options import ModelOptions
from runner.config.schedules import parse_duration, parse_timezone
from runner.config.sinks import check_sink
from runner.config.strict import Strict
from runner.errors import ConfigError, UsageError
from runner.safety.latitude import Approvals
from runner.safety.ssrf import WebPolicy
from runner.statuses import ChainWhen

__all__ = [
    "JOB_NAME",
    "TEMPLATE_SUFFIXES",
    "Job",
    "JobSpec",
    "JobsFile",
    "PreRunFailure",
    "check_context_from",
    "context_key",
    "inputs_of",
    "job_inputs",
    "load_jobs",
    "looks_like_path",
    "referenced_files",
]

Duration = Annotated[float, BeforeValidator(parse_duration)]
SinkItem = Annotated[str | dict[str, Any], BeforeValidator(check_sink)]


def _memory(value: Any) -> Any:
    """``memory: off`` is YAML's false (so is ``no``); ``true`` / ``on`` / ``yes`` name no notebook."""
    if value is False:
        return "off"
    if value is True:
        raise ValueError("true: expected job, off or shared:NAME")
    return value


def _backend(value: Any) -> Any:
    """A string spec (``docker:IMAGE``, ...) becomes its model; a mapping is left to the union."""
    return parse_spec(value) if isinstance(value, str) else value


class PreRunFailure(StrEnum):
    """``pre_run_failure:``: what a failed ``pre_run`` (a non-zero exit, or past
    ``pre_run_timeout``) does to an agent job's run (docs/jobs.md#pre_run)."""

    FAIL = "fail"  # the run ends failed/pre_run with the script's stderr tail; no model call
    INFORM = "inform"  # the model is called and told, in a marked section of its prompt
    IGNORE = "ignore"  # the model is called as if the script had succeeded


class Resume(StrEnum):
    """``resume:``: whether a new attempt of a run whose worker was lost (serve's retry after
    ``worker_lost`` / ``worker_died``, a Celery worker's loss) resumes from the run's journal of
    completed steps (docs/runs.md#durable-runs). ``runner runs resume RUN`` resumes either way."""

    AUTO = "auto"
    OFF = "off"  # the new attempt starts over (as before runner had a journal)


def _resume(value: Any) -> Any:
    """``resume: off`` is YAML's false; ``on`` / ``true`` is not a value (``auto`` is)."""
    if value is False:
        return "off"
    if value is True:
        raise ValueError("true: expected auto or off")
    return value


class Retries(Strict):
    attempts: int = Field(0, ge=0, le=20)
    backoff: Duration = 300.0


class Budget(Strict):
    max_cost_usd: float | None = Field(None, ge=0)
    max_tokens: int | None = Field(None, ge=1)


def _sandbox(value: Any) -> Any:
    """``sandbox: off`` / ``on`` are YAML booleans; the strings are accepted too."""
    if value is True or value == "on":
        return {}
    if value is False or value == "off":
        return {"enabled": False}
    return value


class SandboxSpec(Strict):
    """``sandbox:``: the OS sandbox an agent job's local commands, file tools and MCP servers run
    in (docs/safety.md#the-sandbox). ``off`` runs them as the runner's own user."""

    enabled: bool = True
    network: bool = True  # false: a network namespace of the run's own (loopback only)
    writable: list[str] = Field(default_factory=list)  # folders writable besides the workdir (~ and jobs.yaml-relative)


class DelegationSpec(Strict):
    """``delegation:``: how deep subagents (``delegate_task``) may nest and how many run at once."""

    max_depth: int = Field(1, ge=1, le=2)  # 1: the run's subagents cannot delegate; 2: theirs can, once more
    max_children: int = Field(3, ge=1, le=3)  # subagents of one run running at the same time


class WebSpec(Strict):
    """``web:``: where web_fetch may connect (see docs/safety.md)."""

    allow_private: bool = False
    allow_domains: list[str] = Field(default_factory=list)
    deny_domains: list[str] = Field(default_factory=list)

    @field_validator("allow_domains", "deny_domains")
    @classmethod
    def _domains(cls, value: list[str]) -> list[str]:
        for domain in value:
            if not re.match(r"^\.?[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*\.?$", domain):
                raise ValueError(f"{domain!r} is not a domain name (write example.com, no scheme or path)")
        return value

    def policy(self) -> WebPolicy:
        return WebPolicy(self.allow_private, tuple(self.allow_domains), tuple(self.deny_domains))


ENV_REF = re.compile(r"^env:[A-Za-z_][A-Za-z0-9_]*$")
MAX_HOOK_BYTES = 64 * 1024 * 1024  # the largest ``max_bytes`` a webhook may set


class WebhookSpec(Strict):
    """``triggers: [{webhook: {...}}]``: ``POST /hooks/JOB`` signed with ``secret`` starts a run
    (docs/jobs.md#triggers). The secret is a reference (``env:NAME``), never the value."""

    secret: str
    max_bytes: int = Field(1024 * 1024, ge=1, le=MAX_HOOK_BYTES)  # a bigger body is refused (413)
    tolerance: Duration = 300.0  # X-Runner-Signature's t= may be this far from the clock

    @field_validator("secret")
    @classmethod
    def _secret_ref(cls, value: str) -> str:
        if not ENV_REF.match(value):
            raise ValueError("write env:NAME (the secret's environment variable), not the secret itself")
        return value

    @field_validator("tolerance")
    @classmethod
    def _tolerance(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be greater than 0")
        return value


class TriggerSpec(Strict):
    """One entry of ``triggers:`` (today: ``webhook``)."""

    webhook: WebhookSpec


def _after(value: Any) -> Any:
    """``after: JOB`` / ``after: [JOB, ...]`` are ``after: {jobs: [...]}`` (when: success)."""
    if isinstance(value, str):
        return {"jobs": [value]}
    if isinstance(value, list):
        return {"jobs": value}
    return value


class AfterSpec(Strict):
    """``after:``: start this job when a run of one of ``jobs`` ends as ``when`` says (serve)."""

    jobs: list[str] = Field(min_length=1)
    when: ChainWhen = ChainWhen.SUCCESS


class FollowupsSpec(Strict):
    """``followups:``: how many follow-ups a job's runs may have pending (``schedule_followup``,
    toolset ``schedule``) and how far ahead they may be."""

    max_pending: int = Field(3, ge=1, le=100)
    max_delay: Duration = Field(7 * 86400.0, gt=0)


class JobSpec(Strict):
    """One job as written in jobs.yaml (after defaults are merged in)."""

    description: str = ""
    enabled: bool = True
    schedule: str | None = None
    timezone: str | None = None
    jitter: Duration = 0.0
    prompt: str | None = None
    vars: dict[str, Any] = Field(default_factory=dict)
    env_vars: list[str] = Field(default_factory=list)
    pre_run: str | None = None
    pre_run_timeout: Duration = 300.0
    pre_run_failure: PreRunFailure = PreRunFailure.FAIL
    resume: Annotated[Resume, BeforeValidator(_resume)] = Resume.AUTO
    skip_when_empty: bool = False  # a pre_run that printed nothing on stdout ends the run skipped (no model call)
    agent: bool = True
    model: str | list[str] = "default"
    model_options: ModelOptions = Field(default_factory=ModelOptions)
    toolsets: list[str] = Field(default_factory=lambda: ["terminal", "files", "memory"])
    skills: list[str] = Field(default_factory=list)
    workdir: str | None = None  # before ``backend``: the ssh check below reads it
    backend: Annotated[BackendSpec, BeforeValidator(_backend)] = Field(default_factory=LocalSpec)
    sandbox: Annotated[SandboxSpec, BeforeValidator(_sandbox)] = Field(default_factory=SandboxSpec)
    approvals: Approvals = Approvals.DENY
    allow: list[str] = Field(default_factory=list)
    max_iterations: int = Field(30, ge=1, le=10_000)
    timeout: Duration = 1200.0
    idle_timeout: Duration = 300.0
    approval_timeout: Duration = 3600.0  # how long a parked approval waits (approvals: manual, nobody at a terminal)
    smart_timeout: Duration = 30.0  # how long the judge model of approvals: smart may take; then denied
    retries: Retries = Field(default_factory=Retries)
    catchup: Literal["skip", "once", "all"] = "once"
    catchup_window: Duration | None = None
    overlap: Literal["skip", "queue", "allow", "replace"] = "skip"
    queue: str = Field("runner", pattern=r"^[A-Za-z0-9_.-]{1,64}$")  # the Celery queue (executor: celery)
    deliver: list[SinkItem] = Field(default_factory=lambda: list[str | dict[str, Any]](["file"]))
    on_failure: list[SinkItem] | None = None  # alert sinks; None: config.yaml's ``alerts:``
    budget: Budget = Field(default_factory=Budget)
    env_passthrough: list[str] = Field(default_factory=list)
    allow_paths: list[str] = Field(default_factory=list)
    context_budget: int | None = Field(None, ge=1000)
    summarize: bool = False
    allow_truncated: bool = False  # an answer cut at the output token limit is a success (else failed/truncated)
    auxiliary: str | None = None  # PROVIDER[/MODEL] for side calls; None: config.yaml's ``auxiliary:``
    skills_review: bool | None = None  # review the run for a reusable skill; None: config.yaml's ``skills_review:``
    pause_after_failures: int | None = Field(None, ge=1)
    web: WebSpec = Field(default_factory=WebSpec)
    delegation: DelegationSpec = Field(default_factory=DelegationSpec)
    memory: Annotated[str, BeforeValidator(_memory)] = "job"  # job | shared:NAME | off (docs/memory.md)
    context_from: list[str] = Field(default_factory=list)  # jobs whose last output is {{ context.NAME }}
    triggers: list[TriggerSpec] = Field(default_factory=list)  # events that start a run (webhook)
    after: Annotated[AfterSpec | None, BeforeValidator(_after)] = None  # chained: runs when these end
    checkpoints: StrictBool | None = None  # workdir snapshots before each changing turn; None: on but for ssh
    checkpoint_max_mb: int = Field(100, ge=1, le=100_000)  # the snapshotted files together (else no checkpoint)
    checkpoint_max_file_mb: int = Field(10, ge=1, le=100_000)  # one file (else left out, and named)
    followups: FollowupsSpec = Field(default_factory=FollowupsSpec)  # schedule_followup's bounds

    @property
    def webhook(self) -> WebhookSpec | None:
        """The job's webhook trigger (the first, if it names several), or None."""
        return next((t.webhook for t in self.triggers), None)

    @property
    def after_spec(self) -> AfterSpec | None:
        return self.after

    @property
    def after_jobs(self) -> tuple[str, ...]:
        return tuple(self.after.jobs) if self.after is not None else ()

    @field_validator("triggers")
    @classmethod
    def _one_webhook(cls, value: list[TriggerSpec]) -> list[TriggerSpec]:
        if len(value) > 1:
            raise ValueError("one webhook trigger per job (a second secret would be a second job)")
        return value

    @field_validator("memory")
    @classmethod
    def _memory_scope(cls, value: str) -> str:
        kind, sep, name = value.partition(":")
        if value in ("job", "off") or (sep and kind == "shared" and JOB_NAME.fullmatch(name)):
            return value
        raise ValueError(f"{value!r}: expected job, off or shared:NAME (NAME like a job name)")

    @field_validator("timezone")
    @classmethod
    def _tz(cls, value: str | None) -> str | None:
        if value is not None:
            parse_timezone(value)
        return value

    @field_validator("model")
    @classmethod
    def _model(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, list) and not value:
            raise ValueError("model list is empty")
        return value

    @field_validator("env_vars", "env_passthrough")
    @classmethod
    def _env_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return value

    @field_validator("timeout", "idle_timeout", "approval_timeout", "smart_timeout")
    @classmethod
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be greater than 0")
        return value

    @field_validator("backend")
    @classmethod
    def _remote_workdir(cls, backend: BackendSpec, info: ValidationInfo) -> BackendSpec:
        """On an ssh backend the job's ``workdir`` names the remote folder (the backend's own
        ``workdir`` when that is unset); two different folders are an error, not a silent choice."""
        workdir = info.data.get("workdir")
        if workdir is None or not isinstance(backend, SSHSpec):
            return backend
        if backend.workdir not in (None, workdir):
            raise ValueError(
                f"workdir {workdir!r} and backend.workdir {backend.workdir!r} differ; on ssh they name "
                "the same remote folder: set one"
            )
        return backend.model_copy(update={"workdir": workdir})


def _share_defaults(spec: JobSpec, shared: dict[str, Any]) -> JobSpec:
    """Every field the job leaves out holds one default value shared by the jobs of one file
    (``shared``: field name -> that value) instead of a copy of its own (the sub-models and lists of
    ~45 unset fields: ~4 KB a job, 40 MB for serve with 10,000 jobs). The models are frozen and
    nothing mutates a job's lists, so sharing is safe."""
    values, given = spec.__dict__, spec.model_fields_set
    for name in JobSpec.model_fields:
        if name not in given:
            values[name] = shared.setdefault(name, values[name])
    return spec


def _merge(defaults: dict[str, Any], job: dict[str, Any]) -> dict[str, Any]:
    out = dict(defaults)
    for key, value in job.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and key != "backend":
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def _errors(prefix: str, exc: ValidationError) -> list[str]:
    problems = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith(("function-", "tagged-union")))
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        problems.append(f"{prefix}{loc or '(job)'}: {msg}")
    return problems


def load_jobs(
    path: Path,
    *,
    default_timezone: str = "UTC",
    now: datetime | None = None,
    own_tools: Callable[[], Iterable[str]] | None = None,
) -> JobsFile:
    """Parse and validate jobs.yaml; raise ConfigError listing every problem. ``own_tools``: the
    names (tools and toolsets) the operator's tools folders define, asked only when a job names a
    toolset that is neither builtin nor ``mcp:`` (loading them runs the operator's code)."""
    own = OwnNames(own_tools)
    if not path.exists():
        raise UsageError(f"{path}: jobs file not found (use --jobs PATH or set RUNNER_JOBS)")
    data = yamlio.load_file(path) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with 'jobs:' at the top level")
    problems: list[str] = []
    for key in data:
        if key not in ("defaults", "jobs"):
            problems.append(f"{path}: {key}: unknown key (top level takes defaults and jobs)")
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict):
        problems.append(f"{path}: defaults: expected a mapping")
        defaults = {}
    else:
        try:
            JobSpec(**defaults)
        except ValidationError as exc:
            problems.extend(_errors(f"{path}: defaults: ", exc))
            defaults = {}
    raw_jobs = data.get("jobs") or {}
    if not isinstance(raw_jobs, dict):
        problems.append(f"{path}: jobs: expected a mapping of job name to job")
        raw_jobs = {}
    jobs: dict[str, Job] = {}
    names = [str(n) for n in raw_jobs]
    base_dir = path.parent.resolve()  # one Path shared by every job
    shared: dict[str, Any] = {}  # the default values the jobs of this file share
    for name, body in raw_jobs.items():
        name = str(name)
        prefix = f"{path}: job {name}: "
        if not JOB_NAME.match(name):
            problems.append(f"{prefix}name: must match ^[a-z0-9][a-z0-9_-]{{0,63}}$")
            continue
        if body is None:
            body = {}
        if not isinstance(body, dict):
            problems.append(f"{prefix}expected a mapping of job keys")
            continue
        try:
            spec = _share_defaults(JobSpec(**_merge(defaults, body)), shared)
        except ValidationError as exc:
            problems.extend(_errors(prefix, exc))
            continue
        job_problems, job = check_job(
            name, spec, base_dir, default_tz=default_timezone, now=now, own=own, names=names
        )
        problems.extend(prefix + p for p in job_problems)
        if job is not None:
            jobs[name] = job
    problems.extend(f"{path}: job {name}: after: {p}" for name, p in chain_cycles(jobs))
    if problems:
        raise ConfigError(problems)
    return JobsFile(path=path.resolve(), jobs=jobs)
