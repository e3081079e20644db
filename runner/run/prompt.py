"""Prompts: the job's Jinja2 template and the run's frozen system prompt.

Templates render in Jinja2's sandbox (no underscore attributes, bounded ``range``) with
StrictUndefined and a cap on the rendered size: ``'x' * 4000000000`` is refused before it is
built. ``check_template`` finds undefined names statically (for ``jobs validate`` and serve).
"""

from __future__ import annotations

import functools
import traceback
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from runner.config.jobfile import Job, context_key
from runner.errors import TemplateError
from runner.host import secrets

SYSTEM_RULES = """\
You are an unattended agent run by `runner` for the job "{job}". Nobody is watching this run.
- Do not ask questions; nobody will answer. Decide, act, and say what you assumed.
- Act through the tools rather than describing what you would do.
- Your final message (a reply without tool calls) is the run's output and is delivered as is.
- If there is nothing worth reporting, reply with exactly [SILENT].
- Dangerous commands may be blocked by policy; when a tool says "blocked", find another way."""


MAX_OUTPUT_CHARS = 4_000_000  # a rendered prompt; far above any context window
MAX_POWER_BITS = 100_000  # `2 ** n` results beyond this many bits are refused
KNOWN_VARIABLES = frozenset(
    {"now", "today", "yesterday", "job", "run", "vars", "pre_run", "last_output", "env", "context", "trigger", "upstream"}
)
#: the fields of the variables whose fields every run has (``variables`` builds them)
FIELDS: dict[str, tuple[str, ...]] = {
    "pre_run": ("stdout", "exit_code", "stderr"),
    "job": ("name", "schedule", "description"),
    "run": ("id", "slot", "trigger"),
    "trigger": ("kind", "payload", "headers"),
}
UPSTREAM_FIELDS = ("output", "status", "run_id")
CONTEXT_CHARS = 8_000  # of each ``context_from`` job's last output in ``{{ context.NAME }}``


class OutputCapExceeded(Exception):
    """A template would render more than the cap (``'x' * 4000000000``); ``render`` turns it
    into a TemplateError naming the template."""


def plain_text(source: str) -> bool:
    """Text Jinja2 renders unchanged: every tag, expression and comment starts with ``{`` (line
    statements are off), and only ``\r`` is rewritten (newlines become ``\n``). Such prompts skip
    Jinja2 altogether, and so does its import (about 20 ms of a run's start)."""
    return "{" not in source and "\r" not in source


def _sized(value: Any) -> bool:
    return isinstance(value, str | bytes | list | tuple)


def _check_repeat(left: Any, right: Any, cap: int) -> None:
    for seq, count in ((left, right), (right, left)):
        if _sized(seq) and isinstance(count, int) and len(seq) * count > cap:
            raise OutputCapExceeded(
                f"template output over the {cap:,}-character cap ('*' would make {len(seq) * count:,})"
            )


def template_env(base: Path, *, cap: int = MAX_OUTPUT_CHARS) -> Any:
    """A sandboxed environment whose ``*`` and ``**`` cannot build values beyond ``cap``; an
    undefined name raises ``Missing`` (what was missing, and where it was looked up)."""
    import jinja2
    from jinja2.sandbox import SandboxedEnvironment

    class Missing(jinja2.UndefinedError):
        def __init__(self, message: str, *, name: str | None, holder: Any, hint: str | None):
            super().__init__(message)
            self.name, self.holder, self.hint = name, holder, hint

    class NamedUndefined(jinja2.StrictUndefined):
        """StrictUndefined whose error keeps the missing name and the object it was looked up on."""

        __slots__ = ()

        def __init__(
            self,
            hint: str | None = None,
            obj: Any = jinja2.utils.missing,
            name: str | None = None,
            exc: type[jinja2.TemplateRuntimeError] = jinja2.UndefinedError,
        ) -> None:
            super().__init__(hint, obj, name, exc)
            if exc is jinja2.UndefinedError:
                # jinja2 only calls it with the message: a partial that makes ``Missing`` fits
                self._undefined_exception = functools.partial(Missing, name=name, holder=obj, hint=hint)  # type: ignore[assignment]

    class CappedEnvironment(SandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**"})

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            if operator == "*":
                _check_repeat(left, right, cap)
            elif (
                isinstance(left, int) and isinstance(right, int) and max(left.bit_length(), 1) * right > MAX_POWER_BITS
            ):
                raise OutputCapExceeded(f"template error: '**' result over {MAX_POWER_BITS:,} bits")
            return super().call_binop(context, operator, left, right)

    return CappedEnvironment(
        loader=jinja2.FileSystemLoader(str(base)),
        undefined=NamedUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def render(source: str, variables: dict[str, Any], *, name: str, base: Path, cap: int = MAX_OUTPUT_CHARS) -> str:
    """Render ``source`` (template text); TemplateError names the template, the line and what is
    missing: ``job J: prompt: line 3: pre_run has no field 'stdot' (known: stdout, exit_code, stderr)``."""
    if plain_text(source) and len(source) <= cap:
        return source
    import jinja2

    env = template_env(base, cap=cap)
    try:
        return _capped_join(env.from_string(source).generate(**variables), cap)
    except OutputCapExceeded as exc:
        raise TemplateError(f"{name}: {exc}") from None
    except jinja2.UndefinedError as exc:
        raise TemplateError(f"{_where(name, exc)}: {_missing(exc, variables)}") from None
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateError(f"{_where(name, exc, exc.lineno)}: template syntax error: {exc.message}") from None
    except jinja2.TemplateError as exc:
        raise TemplateError(f"{_where(name, exc)}: template error: {exc}") from None
    except MemoryError:
        raise TemplateError(f"{name}: template error: out of memory while rendering") from None


def _where(name: str, exc: BaseException, lineno: int | None = None) -> str:
    """``NAME: line N`` (an included file named by its path) from the template frame Jinja2 puts
    in the error's traceback; ``NAME`` alone when there is none."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.endswith(".py")]
    if frames:
        last = frames[-1]
        lineno = last.lineno
        if last.filename not in ("<template>", "<unknown>"):
            name = f"{name} (in {last.filename})"
    return f"{name}: line {lineno}" if lineno else name


def _missing(exc: Any, variables: dict[str, Any]) -> str:
    """What an undefined name was: a variable no run defines, or a field its holder lacks."""
    import jinja2

    name, holder = getattr(exc, "name", None), getattr(exc, "holder", jinja2.utils.missing)
    if name is None:
        return f"undefined template variable: {exc.message}"
    if holder is jinja2.utils.missing:
        known = ", ".join(sorted(variables))
        return f"undefined template variable {name!r} (known: {known})"
    path = _path_of(holder, variables)
    what = path or f"a {type(holder).__name__} value"
    if isinstance(holder, dict):
        keys = ", ".join(str(k) for k in holder) or "none"
        return f"{what} has no field {name!r} (known: {keys})"
    return f"{what} ({type(holder).__name__}) has no field {name!r}"


def _path_of(holder: Any, variables: dict[str, Any], depth: int = 3) -> str | None:
    """The dotted name of ``holder`` among the template's variables (``pre_run``, ``vars.repo``)."""
    level: list[tuple[str, Any]] = list(variables.items())
    for _ in range(depth):
        deeper: list[tuple[str, Any]] = []
        for path, value in level:
            if value is holder:
                return path
            if isinstance(value, dict):
                deeper += [(f"{path}.{k}", v) for k, v in value.items()]
        level = deeper
    return None


def _capped_join(chunks: Any, cap: int) -> str:
    out: list[str] = []
    size = 0
    for chunk in chunks:
        size += len(chunk)
        if size > cap:
            raise OutputCapExceeded(f"template output over the {cap:,}-character cap")
        out.append(chunk)
    return "".join(out)


def job_template(job: Job) -> tuple[str, str]:
    """(template source, name for messages) of the job's ``prompt:``."""
    path = job.prompt_path()
    if path is None:
        return job.spec.prompt or "", f"job {job.name}: prompt"
    try:
        return path.read_text(encoding="utf-8"), f"job {job.name}: prompt {job.spec.prompt}"
    except OSError as exc:
        raise TemplateError(f"job {job.name}: prompt: cannot read {path}: {exc.strerror}") from None


def check_syntax(job: Job) -> None:
    source, name = job_template(job)
    if plain_text(source):
        return
    import jinja2

    try:
        template_env(job.base_dir).parse(source)
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateError(f"{name}: line {exc.lineno}: template syntax error: {exc.message}") from None


def check_template(job: Job, env: Any = None) -> list[str]:
    """Problems of the job's template found without rendering it: syntax, names no run defines,
    ``vars.X`` with no X in the job's ``vars:``, ``env.X`` with no X in ``env_vars:``,
    ``context.X`` with no X in ``context_from:`` (dashes as underscores), ``upstream.X`` with no X
    in ``after:``, a field ``pre_run``, ``job``, ``run`` or ``trigger`` does not have (``pre_run.stdot``)."""
    try:
        source, name = job_template(job)
    except TemplateError as exc:
        return [str(exc)]
    if plain_text(source):
        return []
    import jinja2
    from jinja2 import meta

    env = env or template_env(job.base_dir)
    try:
        ast = env.parse(source)
    except jinja2.TemplateSyntaxError as exc:
        return [f"{name}: line {exc.lineno}: template syntax error: {exc.message}"]
    problems = [
        f"{name}: undefined template variable {var!r} (known: {', '.join(sorted(KNOWN_VARIABLES))})"
        for var in sorted(meta.find_undeclared_variables(ast) - KNOWN_VARIABLES - set(env.globals))
    ]
    allowed = {
        "vars": set(job.spec.vars),
        "env": set(job.spec.env_vars),
        "context": {context_key(j) for j in job.spec.context_from},
        "upstream": set(job.spec.after_jobs),
    }
    where = {
        "vars": "the job's vars:",
        "env": "env_vars:",
        "context": "context_from: (dashes as underscores)",
        "upstream": "after:",
    }
    for holder, key, line in _member_uses(ast):
        if holder in FIELDS:
            if key not in FIELDS[holder] and not hasattr(dict, key):
                known = ", ".join(FIELDS[holder])
                problems.append(f"{name}: line {line}: {holder} has no field {key!r} (known: {known})")
        elif key not in allowed[holder]:
            problems.append(f"{name}: line {line}: {holder}.{key} is not defined ({key!r} is not in {where[holder]})")
    return problems


def _member_uses(ast: Any) -> list[tuple[str, str, int]]:
    """``vars.X`` / ``vars['X']`` / ``env.X`` / ``context.X`` (and ``pre_run``, ``job``, ``run``)
    uses in the template: (holder, key, line)."""
    from jinja2 import nodes

    out = []
    assigned = {n.name for n in ast.find_all(nodes.Name) if n.ctx in ("store", "param")}  # {% set run = ... %}
    holders = {"vars", "env", "context", "upstream", *FIELDS} - assigned
    for node in ast.find_all((nodes.Getattr, nodes.Getitem)):
        target = node.node
        if not (isinstance(target, nodes.Name) and target.name in holders and target.ctx == "load"):
            continue
        if isinstance(node, nodes.Getattr):
            out.append((target.name, node.attr, node.lineno))
        elif isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str):
            out.append((target.name, node.arg.value, node.lineno))
    return out


def variables(
    job: Job,
    *,
    now: datetime,
    run: dict[str, Any],
    vars_override: dict[str, str] | None = None,
    pre_run: dict[str, Any] | None = None,
    last_output: str = "",
    environ: dict[str, str] | None = None,
    context: dict[str, str] | None = None,
    trigger: dict[str, Any] | None = None,
    upstream: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """``context``: the ``context_from`` jobs' outputs by job name (missing ones render as "");
    ``trigger``: the event's ``kind``, ``payload`` and ``headers`` (``runner.run.untrusted``; empty
    ones for a run no event started); ``upstream``: per ``after:`` job, the ``output``, ``status``
    and ``run_id`` of the run that started this one (empty for the others)."""
    env = secrets.environ() if environ is None else environ
    given = context or {}
    local_now = now.astimezone(_zone(job.tz_name))
    from runner.run.untrusted import no_event

    return {
        "now": local_now,
        "today": local_now.date().isoformat(),
        "yesterday": (local_now.date() - timedelta(days=1)).isoformat(),
        "job": {"name": job.name, "schedule": job.spec.schedule, "description": job.spec.description},
        "run": run,
        "vars": {**job.spec.vars, **(vars_override or {})},
        "pre_run": pre_run or {"stdout": "", "exit_code": None, "stderr": ""},
        "last_output": last_output,
        "env": {name: env[name] for name in job.spec.env_vars if name in env},
        "context": {context_key(other): given.get(other, "") for other in job.spec.context_from},
        "trigger": trigger or no_event(str(run.get("trigger") or "")),
        "upstream": {
            other: (upstream or {}).get(other) or dict.fromkeys(UPSTREAM_FIELDS, "") for other in job.spec.after_jobs
        },
    }


def capped_context(text: str, cap: int = CONTEXT_CHARS) -> str:
    """A ``context_from`` output as the template gets it: its first ``cap`` characters and a marker."""
    if len(text) <= cap:
        return text
    return f"{text[:cap]}\n[... {len(text) - cap:,} more characters not shown]"


def _zone(name: str) -> Any:
    from zoneinfo import ZoneInfo

    return ZoneInfo(name)


def system_prompt(
    job: Job, *, context_file: str | None = None, skills_index: str | None = None, memory: str | None = None
) -> str:
    """Built once per run and never changed during it (a stable prefix for prompt caches); ``memory``
    is the notebook as it was when the run started (writes during the run show from the next one)."""
    parts = [SYSTEM_RULES.format(job=job.name)]
    if job.spec.description:
        parts.append(f"Job description: {job.spec.description}")
    if skills_index:
        parts.append(skills_index)
    if memory:
        parts.append(memory)
    if context_file:
        parts.append(context_file)
    return "\n\n".join(parts)
