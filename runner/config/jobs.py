"""jobs.yaml: the strict job schema, defaults merging and whole-file validation.

Every problem in the file is collected and reported at once as ``FILE: job NAME: field: message``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BeforeValidator, Field, ValidationError, ValidationInfo, field_validator

from backends.spec import BackendSpec, LocalSpec, parse_spec
from backends.ssh_spec import SSHSpec
from runner.config import yamlio
from runner.config.model_options import ModelOptions
from runner.config.schedules import Schedule, parse_duration, parse_schedule, parse_timezone
from runner.config.sinks import check_sink
from runner.config.strict import Strict
from runner.errors import ConfigError, UsageError
from runner.lazyre import LazyPattern

if TYPE_CHECKING:
    from runner.safety.ssrf import WebPolicy

JOB_NAME = LazyPattern(r"^[a-z0-9][a-z0-9_-]{0,63}$")
TEMPLATE_SUFFIXES = (".j2", ".jinja", ".jinja2", ".md", ".txt", ".tmpl")

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


class Retries(Strict):
    attempts: int = Field(0, ge=0, le=20)
    backoff: Duration = 300.0


class Budget(Strict):
    max_cost_usd: float | None = Field(None, ge=0)
    max_tokens: int | None = Field(None, ge=1)


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
        from runner.safety.ssrf import WebPolicy

        return WebPolicy(self.allow_private, tuple(self.allow_domains), tuple(self.deny_domains))


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
    agent: bool = True
    model: str | list[str] = "default"
    model_options: ModelOptions = Field(default_factory=ModelOptions)
    toolsets: list[str] = Field(default_factory=lambda: ["terminal", "files", "memory"])
    skills: list[str] = Field(default_factory=list)
    workdir: str | None = None  # before ``backend``: the ssh check below reads it
    backend: Annotated[BackendSpec, BeforeValidator(_backend)] = Field(default_factory=LocalSpec)
    approvals: Literal["deny", "approve", "manual"] = "deny"
    allow: list[str] = Field(default_factory=list)
    max_iterations: int = Field(30, ge=1, le=10_000)
    timeout: Duration = 1200.0
    idle_timeout: Duration = 300.0
    approval_timeout: Duration = 3600.0  # how long a parked approval waits (approvals: manual, nobody at a terminal)
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
    auxiliary: str | None = None  # PROVIDER[/MODEL] for side calls; None: config.yaml's ``auxiliary:``
    skills_review: bool | None = None  # review the run for a reusable skill; None: config.yaml's ``skills_review:``
    pause_after_failures: int | None = Field(None, ge=1)
    web: WebSpec = Field(default_factory=WebSpec)
    delegation: DelegationSpec = Field(default_factory=DelegationSpec)
    memory: Annotated[str, BeforeValidator(_memory)] = "job"  # job | shared:NAME | off (docs/memory.md)
    context_from: list[str] = Field(default_factory=list)  # jobs whose last output is {{ context.NAME }}

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

    @field_validator("timeout", "idle_timeout", "approval_timeout")
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


@dataclass(frozen=True)
class Job:
    """A validated job with paths resolved against the folder of jobs.yaml."""

    name: str
    spec: JobSpec
    base_dir: Path
    tz_name: str
    schedule_obj: Schedule | None = field(default=None, compare=False)

    @property
    def workdir(self) -> Path:
        return (self.base_dir / self.spec.workdir).resolve() if self.spec.workdir else self.base_dir

    @property
    def models(self) -> list[str]:
        return [self.spec.model] if isinstance(self.spec.model, str) else list(self.spec.model)

    def prompt_path(self) -> Path | None:
        prompt = self.spec.prompt
        if prompt is None or not looks_like_path(prompt):
            return None
        return (self.base_dir / prompt).resolve()

    def resolve_path(self, value: str) -> Path:
        return (self.base_dir / value).expanduser().resolve()


@dataclass(frozen=True)
class JobsFile:
    path: Path
    jobs: dict[str, Job]

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    def get(self, name: str) -> Job:
        job = self.jobs.get(name)
        if job is None:
            raise UsageError(f"{self.path}: unknown job {_shown(name)}{_suggest(name, self.jobs)}")
        return job


def _shown(name: str, limit: int = 80) -> str:
    return repr(name if len(name) <= limit else name[:limit] + "...")


def _suggest(name: str, known: dict[str, Job]) -> str:
    """The closest job names (at most 3); the whole list only when it is short."""
    import difflib

    if not known:
        return "; the file has no jobs"
    close = difflib.get_close_matches(name[:64], list(known), n=3, cutoff=0.6)
    if close:
        return f"; did you mean {', '.join(close)}?"
    if len(known) <= 10:
        return f"; known jobs: {', '.join(sorted(known))}"
    return f"; it has {len(known)} jobs (see: runner jobs list)"


def looks_like_path(prompt: str) -> bool:
    text = prompt.strip()
    if not text or "\n" in text or " " in text:
        return False
    return text.endswith(TEMPLATE_SUFFIXES) or "/" in text


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
    own = _OwnNames(own_tools)
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
            spec = JobSpec(**_merge(defaults, body))
        except ValidationError as exc:
            problems.extend(_errors(prefix, exc))
            continue
        job_problems, job = _check_job(name, spec, path.parent.resolve(), default_timezone, now, own)
        context_problems = check_context_from(name, spec.context_from, [str(n) for n in raw_jobs])
        if context_problems:
            job_problems, job = [*job_problems, *context_problems], None
        problems.extend(prefix + p for p in job_problems)
        if job is not None:
            jobs[name] = job
    if problems:
        raise ConfigError(problems)
    return JobsFile(path=path.resolve(), jobs=jobs)


def context_key(job: str) -> str:
    """The name a job's output has under ``context`` in templates: dashes become underscores."""
    return job.replace("-", "_")


def check_context_from(name: str, wanted: list[str], known: list[str]) -> list[str]:
    """Each ``context_from:`` entry names another job of the file, once."""
    problems = []
    seen: dict[str, str] = {}
    for other in wanted:
        key = context_key(other)
        if other == name:
            problems.append(f"context_from: {_shown(other)} is this job (its own last output is {{{{ last_output }}}})")
        elif other not in known:
            problems.append(f"context_from: unknown job {_shown(other)}{_suggest_names(other, known)}")
        elif key in seen:
            problems.append(f"context_from: {_shown(other)} and {_shown(seen[key])} are both context.{key}")
        seen.setdefault(key, other)
    return problems


def _suggest_names(name: str, known: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name[:64], known, n=3, cutoff=0.6)
    if close:
        return f"; did you mean {', '.join(close)}?"
    return f"; jobs in this file: {', '.join(sorted(known)[:10])}{', ...' if len(known) > 10 else ''}"


def _check_backend(job: Job) -> list[str]:
    """What the backend spec can only tell with the workdir (docker mount sources, no Docker socket)."""
    try:
        job.spec.backend.check(job.workdir)
    except UsageError as exc:
        return [f"backend: {exc}"]
    return []


PRE_RUN_SUFFIXES = (".sh", ".bash", ".py", ".pl", ".rb", ".js")


def _check_pre_run(spec: JobSpec, base_dir: Path) -> list[str]:
    """A pre_run whose first word is a relative script path must name a file beside jobs.yaml."""
    import shlex

    text = (spec.pre_run or "").strip()
    if not text:
        return []
    try:
        words = shlex.split(text)
    except ValueError as exc:
        return [f"pre_run: cannot split the command: {exc}"]
    first = words[0] if words else ""
    if not first or first.startswith(("/", "~", "$")) or not ("/" in first or first.endswith(PRE_RUN_SUFFIXES)):
        return []
    script = (base_dir / first).resolve()
    if not script.is_file():
        return [f"pre_run: script {first} not found (looked in {base_dir})"]
    return []


class _OwnNames:
    """The operator's tool names, asked for at most once per load."""

    def __init__(self, source: Callable[[], Iterable[str]] | None):
        self._source = source
        self._names: frozenset[str] | None = None

    def __contains__(self, item: str) -> bool:
        if self._names is None:
            self._names = frozenset(self._source()) if self._source is not None else frozenset()
        return item in self._names


def _check_toolsets(spec: JobSpec, own: _OwnNames) -> list[str]:
    from runner.config.mcp import is_ref, parse_ref
    from runner.tools import known_toolset_names

    known = known_toolset_names()
    problems = []
    for item in spec.toolsets:
        if is_ref(item):
            try:
                parse_ref(item)
            except ValueError as exc:
                problems.append(f"toolsets: {exc}")
        elif item not in known and item not in own:
            problems.append(f"toolsets: unknown toolset or tool {item!r}; known: {', '.join(sorted(known))}")
    return problems


def _check_job(
    name: str, spec: JobSpec, base_dir: Path, default_tz: str, now: datetime | None, own: _OwnNames
) -> tuple[list[str], Job | None]:
    problems: list[str] = []
    tz_name = spec.timezone or default_tz
    schedule_obj = None
    if spec.schedule is not None:
        try:
            schedule_obj = parse_schedule(spec.schedule, parse_timezone(tz_name), now=now)
        except ValueError as exc:
            problems.append(f"schedule: {exc}")
    if spec.agent and not spec.prompt:
        problems.append("prompt: required for an agent job (or set agent: false with a pre_run)")
    if not spec.agent and not spec.pre_run:
        problems.append("pre_run: required when agent is false")
    problems.extend(_check_pre_run(spec, base_dir))
    job = Job(name=name, spec=spec, base_dir=base_dir, tz_name=tz_name, schedule_obj=schedule_obj)
    prompt_path = job.prompt_path()
    if prompt_path is not None and not prompt_path.is_file():
        problems.append(f"prompt: template file {spec.prompt} not found (looked in {base_dir})")
    if spec.workdir and not job.workdir.is_dir() and spec.backend.type == "local":
        problems.append(f"workdir: {spec.workdir} is not a folder")
    problems.extend(_check_backend(job))
    problems.extend(_check_toolsets(spec, own))
    return problems, (None if problems else job)


def referenced_files(jobs: JobsFile) -> list[Path]:
    """jobs.yaml, prompt templates and pre_run scripts (what hot reload watches and a run protects)."""
    return sorted({jobs.path, *inputs_of(jobs.jobs)})


def inputs_of(jobs: Mapping[str, Job]) -> tuple[Path, ...]:
    """The prompt templates and pre_run scripts of a set of jobs, each once."""
    return tuple(dict.fromkeys(p for job in jobs.values() for p in job_inputs(job)))


def job_inputs(job: Job) -> list[Path]:
    """The files one job reads from the project: its prompt template and its pre_run script."""
    prompt = job.prompt_path()
    return [prompt, *_script(job)] if prompt is not None else _script(job)


def _script(job: Job) -> list[Path]:
    text = job.spec.pre_run or ""
    try:
        first = shlex.split(text)[0] if text.strip() else ""
    except ValueError:
        return []
    if not first:
        return []
    path = job.resolve_path(first)
    return [path] if path.is_file() else []
