"""Prompts: the job's Jinja2 template (StrictUndefined) and the run's frozen system prompt."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from runner import secrets
from runner.config.jobs import Job
from runner.errors import TemplateError

SYSTEM_RULES = """\
You are an unattended agent run by `runner` for the job "{job}". Nobody is watching this run.
- Do not ask questions; nobody will answer. Decide, act, and say what you assumed.
- Act through the tools rather than describing what you would do.
- Your final message (a reply without tool calls) is the run's output and is delivered as is.
- If there is nothing worth reporting, reply with exactly [SILENT].
- Dangerous commands may be blocked by policy; when a tool says "blocked", find another way."""


def template_env(base: Path) -> Any:
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(base)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def render(source: str, variables: dict[str, Any], *, name: str, base: Path) -> str:
    """Render ``source`` (template text) with StrictUndefined; TemplateError names the variable."""
    import jinja2

    env = template_env(base)
    try:
        return env.from_string(source).render(**variables)
    except jinja2.UndefinedError as exc:
        raise TemplateError(f"{name}: undefined template variable: {exc.message}") from None
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateError(f"{name}: line {exc.lineno}: template syntax error: {exc.message}") from None
    except jinja2.TemplateError as exc:
        raise TemplateError(f"{name}: template error: {exc}") from None


def job_template(job: Job) -> tuple[str, str]:
    """(template source, name for messages) of the job's ``prompt:``."""
    path = job.prompt_path()
    if path is None:
        return job.spec.prompt or "", f"job {job.name}: prompt"
    try:
        return path.read_text(encoding="utf-8"), str(path)
    except OSError as exc:
        raise TemplateError(f"job {job.name}: prompt: cannot read {path}: {exc.strerror}") from None


def check_syntax(job: Job) -> None:
    import jinja2

    source, name = job_template(job)
    try:
        template_env(job.base_dir).parse(source)
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateError(f"{name}: line {exc.lineno}: template syntax error: {exc.message}") from None


def variables(
    job: Job,
    *,
    now: datetime,
    run: dict[str, Any],
    vars_override: dict[str, str] | None = None,
    pre_run: dict[str, Any] | None = None,
    last_output: str = "",
    environ: dict[str, str] | None = None,
) -> dict[str, Any]:
    env = secrets.environ() if environ is None else environ
    local_now = now.astimezone(_zone(job.tz_name))
    return {
        "now": local_now,
        "today": local_now.date().isoformat(),
        "yesterday": (local_now.date() - timedelta(days=1)).isoformat(),
        "job": {"name": job.name, "schedule": job.spec.schedule, "description": job.spec.description},
        "run": run,
        "vars": {**job.spec.vars, **(vars_override or {})},
        "pre_run": pre_run or {"stdout": "", "exit_code": None},
        "last_output": last_output,
        "env": {name: env[name] for name in job.spec.env_vars if name in env},
    }


def _zone(name: str) -> Any:
    from zoneinfo import ZoneInfo

    return ZoneInfo(name)


def system_prompt(job: Job, *, context_file: str | None = None, skills_index: str | None = None) -> str:
    """Built once per run and never changed during it (a stable prefix for prompt caches)."""
    parts = [SYSTEM_RULES.format(job=job.name)]
    if job.spec.description:
        parts.append(f"Job description: {job.spec.description}")
    if skills_index:
        parts.append(skills_index)
    if context_file:
        parts.append(context_file)
    return "\n\n".join(parts)
