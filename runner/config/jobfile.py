"""A validated jobs.yaml as the runner uses it, without pydantic: ``Job`` and ``JobsFile``, the
checks a job must pass beyond its schema (schedule, prompt template, pre_run script, workdir,
backend, toolsets, ``context_from``) and the files a job reads.

``runner.config.jobs`` validates the schema with pydantic and then runs ``check_job`` here.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from runner.config.refs import is_ref, parse_ref
from runner.config.schedules import Schedule, parse_schedule, parse_timezone
from runner.errors import UsageError
from runner.tools import known_toolset_names

if TYPE_CHECKING:
    from runner.config.jobs import JobSpec

JOB_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
TEMPLATE_SUFFIXES = (".j2", ".jinja", ".jinja2", ".md", ".txt", ".tmpl")


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
    def sandboxed(self) -> bool:
        """An agent job on the local backend runs in the sandbox unless it says ``sandbox: off``
        (a script-only job runs the operator's own script, as the operator's user)."""
        spec = self.spec
        return spec.agent and spec.backend.type == "local" and spec.sandbox.enabled

    @property
    def checkpointed(self) -> bool:
        """An agent job's runs snapshot the workdir before each turn that may change it
        (``checkpoints:``; by default on the local and Docker backends, whose files are on this
        machine; never on SSH, whose files are on the remote host)."""
        spec = self.spec
        wanted = spec.checkpoints if spec.checkpoints is not None else spec.backend.type != "ssh"
        return spec.agent and wanted and spec.backend.type != "ssh"

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


def check_after(name: str, wanted: tuple[str, ...], known: list[str]) -> list[str]:
    """Each ``after:`` entry names another job of the file, once (a job after itself is a cycle)."""
    problems = []
    for i, other in enumerate(wanted):
        if other == name:
            problems.append(f"after: cycle {name} -> {name} (a job cannot run after itself)")
        elif other not in known:
            problems.append(f"after: unknown job {_shown(other)}{_suggest_names(other, known)}")
        elif other in wanted[:i]:
            problems.append(f"after: {_shown(other)} is listed twice")
    return problems


def chain_cycles(jobs: Mapping[str, Job]) -> list[tuple[str, str]]:
    """(job, problem) for each cycle of ``after:`` edges among ``jobs`` (a -> b -> a), named once
    by its first job in name order: ``cycle a -> b -> c -> a``."""
    graph = {n: [u for u in j.spec.after_jobs if u in jobs and u != n] for n, j in jobs.items()}
    found: list[tuple[str, str]] = []
    seen_cycles: set[frozenset[str]] = set()
    done: set[str] = set()
    for start in sorted(graph):
        stack: list[tuple[str, list[str]]] = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for up in sorted(graph[node], reverse=True):
                if up == start:
                    members = frozenset(path)
                    if members not in seen_cycles:
                        seen_cycles.add(members)
                        found.append((start, "cycle " + " -> ".join([*path, start])))
                elif up not in path and up not in done:
                    stack.append((up, [*path, up]))
        done.add(start)
    return found


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
    if job.spec.checkpoints and job.spec.backend.type == "ssh":
        return [
            "checkpoints: not available on the ssh backend (the files are on the remote host); "
            "set checkpoints: false or leave it out (docs/backends.md#checkpoints)"
        ]
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


class OwnNames:
    """The operator's tool names, asked for at most once per load."""

    def __init__(self, source: Callable[[], Iterable[str]] | None):
        self._source = source
        self._names: frozenset[str] | None = None

    def __contains__(self, item: str) -> bool:
        if self._names is None:
            self._names = frozenset(self._source()) if self._source is not None else frozenset()
        return item in self._names


def _check_toolsets(spec: JobSpec, own: OwnNames) -> list[str]:
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


def check_job(
    name: str, spec: JobSpec, base_dir: Path, *, default_tz: str, now: datetime | None, own: OwnNames, names: list[str]
) -> tuple[list[str], Job | None]:
    """What is wrong with job ``name`` beyond its schema (``names``: every job of the file, for
    ``context_from``), and the job when nothing is."""
    problems, job = _check_job(name, spec, base_dir, default_tz, now, own)
    context_problems = check_context_from(name, spec.context_from, names) + check_after(name, spec.after_jobs, names)
    if context_problems:
        return [*problems, *context_problems], None
    return problems, job


def _check_job(
    name: str, spec: JobSpec, base_dir: Path, default_tz: str, now: datetime | None, own: OwnNames
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
