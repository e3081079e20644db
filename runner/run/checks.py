"""Checks of a loaded jobs.yaml that need more than the file: templates read statically, model
providers from config.yaml, one-shots against the clock, skills from the skills loader.

``runner jobs validate`` reports them as errors (exit 2); serve's reload logs them as warnings,
so a one-shot that already ran does not stop the scheduler.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.config.jobfile import Job, JobsFile
from runner.config.refs import is_ref, parse_ref
from runner.config.schedules import OneShotSchedule
from runner.errors import ConfigError
from runner.run.budget import plan
from runner.run.model_choice import choose
from runner.run.prompt import check_template, template_env
from runner.skills.loader import load_catalog, sources_for

if TYPE_CHECKING:
    from runner.config.machine import Config
    from runner.settings import Settings


def check_jobs(jobs: JobsFile, settings: Settings, *, now: datetime) -> list[str]:
    """Every problem as ``FILE: job NAME: field: message``, in job order."""

    config = _config(settings)
    envs: dict[Path, Any] = {}
    skills = _skill_names(settings) if any(j.spec.skills for j in jobs.jobs.values()) else None
    problems: list[str] = []
    for job in jobs.jobs.values():
        prefix = f"{jobs.path}: job {job.name}: "
        env = envs.setdefault(job.base_dir, template_env(job.base_dir))
        problems.extend(prefix + p for p in check_job(job, config, env=env, now=now, skills=skills))
    problems.extend(tool_file_problems(settings))
    return problems


def tool_file_problems(settings: Settings) -> list[str]:
    """``FILE:LINE: message`` for each broken file in the operator's tools folders."""
    try:
        return list(settings.own_tools().problems)
    except ConfigError:  # config.yaml itself is broken: reported by the models check
        return []


def check_job(job: Job, config: Config | None, *, env: Any, now: datetime, skills: set[str] | None) -> list[str]:
    problems: list[str] = []
    if job.spec.agent:
        problems.extend(_field(p.removeprefix(f"job {job.name}: ")) for p in check_template(job, env))
        if config is not None:
            problems.extend(_check_models(job, config))
            problems.extend(_check_budget(job, config))
    if config is not None:
        problems.extend(_check_mcp(job, config))
    sched = job.schedule_obj
    if isinstance(sched, OneShotSchedule) and sched.at is not None and sched.at < now:
        problems.append(f"schedule: {job.spec.schedule} is in the past; this one-shot will never fire")
    if skills is not None:
        for name in job.spec.skills:
            if name not in skills:
                problems.append(f"skills: no skill named {name!r} (see: runner skills list)")
    return problems


def _field(problem: str) -> str:
    """A template problem as ``prompt: ...`` (an inline prompt's) or ``prompt FILE: ...`` (a file's)."""
    return problem if problem.startswith("prompt ") else f"prompt: {problem.removeprefix('prompt: ')}"


def _check_mcp(job: Job, config: Config) -> list[str]:
    """Each ``mcp:SERVER`` entry names a server of config.yaml (its tools are known only once it runs)."""

    problems = []
    for item in job.spec.toolsets:
        if not is_ref(item):
            continue
        server, _ = parse_ref(item)
        if server not in config.mcp_servers:
            known = ", ".join(sorted(config.mcp_servers)) or "none configured"
            problems.append(f"toolsets: {item}: no MCP server {server!r} in config.yaml mcp_servers ({known})")
    return problems


def _check_models(job: Job, config: Config) -> list[str]:
    """Each ``model:`` entry names a configured provider (``default`` alone may come from the
    environment at run time: its absence is reported by the run and by ``doctor``)."""
    known = ", ".join(sorted(config.providers)) or "(none)"
    problems = []
    for ref in job.models:
        name, _ = config.split_model_ref(ref)
        if name in config.providers or (name == "default" and not config.providers):
            continue
        if name != ref.partition("/")[0]:
            problems.append(f"model: {ref!r} names no provider, and as a model id it needs a 'default' provider")
        else:
            problems.append(f"model: unknown provider {name!r}; configured: {known}")
    return problems


def _check_budget(job: Job, config: Config) -> list[str]:
    """The auxiliary model names a configured provider; under a ``budgets:`` cap the job has a
    maximum to reserve (the same checks a run makes before its ledger row)."""

    problems: list[str] = []
    providers = [config.split_model_ref(ref)[0] for ref in job.models]
    ref = job.spec.auxiliary or config.auxiliary
    try:
        if ref:
            providers.append(choose(config, ref, job=job.name, key="auxiliary").provider_name)
        plan(config, job, tuple(dict.fromkeys(providers)))
    except ConfigError as exc:
        problems.extend(p.removeprefix(f"job {job.name}: ") for p in exc.problems)
    return problems


def _config(settings: Settings) -> Config | None:
    """config.yaml; None when it is broken (its own check reports that)."""
    try:
        return settings.config
    except ConfigError:
        return None


def _skill_names(settings: Settings) -> set[str]:
    catalog = load_catalog(sources_for(settings))
    return set(catalog.skills) | {s.name for s in catalog.unavailable}
