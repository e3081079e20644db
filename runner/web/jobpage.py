"""The job page (``/jobs/NAME``): the job's definition with secrets masked, its prompt, schedule
and next fires, chain (``after:`` both ways), pending follow-ups, last runs, spend over 30 days.

Reads through the same modules as ``runner jobs list | next | followups list`` and the charts;
nothing here writes (the page's buttons are ``runner.web.actions``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import yaml

from runner.config.sinks import label as sink_label
from runner.serve.planner import JobState, upcoming
from runner.store import followups, queries

if TYPE_CHECKING:
    from runner.config.jobs import Job, JobsFile
    from runner.safety.redact import Redactor
    from runner.store import Store

SPEND_DAYS = 30
NEXT_FIRES = 5
RECENT_RUNS = 10
PROMPT_CHARS = 20_000  # of a prompt file shown
MASKED = "***"
#: settings whose value is a secret unless it is a reference (``env:NAME``)
SECRET_KEY = re.compile(r"(secret|token|password|passwd|credential|auth|cookie|api_?key|private)", re.I)
ENV_REF = re.compile(r"^env:[A-Za-z_][A-Za-z0-9_]*$")
SINK_KEYS = frozenset({"deliver", "on_failure"})


def _masked(key: str, value: Any) -> Any:
    """``value`` of setting ``key`` with secrets replaced: secret-named settings (not ``env:``
    references), every header's value, sinks as their masked labels."""
    if key in SINK_KEYS and isinstance(value, list):
        return [sink_label(item) for item in value]
    if key == "headers" and isinstance(value, dict):
        return {k: v if isinstance(v, str) and ENV_REF.match(v) else MASKED for k, v in value.items()}
    if SECRET_KEY.search(key) and value not in (None, "", [], {}):
        if isinstance(value, str) and ENV_REF.match(value):
            return value
        if not isinstance(value, dict | list):
            return MASKED
    if isinstance(value, dict):
        return {k: _masked(str(k), v) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(key, v) for v in value]
    return value


def _placeholder(key: str, value: Any, redactor: Redactor, width: int = 60) -> str:
    """A template variable's value from jobs.yaml as the Run form's hint (masked like the definition)."""
    shown = _masked(key, value)
    text = shown if isinstance(shown, str) else yaml.safe_dump(shown, default_flow_style=True).strip()
    text = redactor(text)
    return text if len(text) <= width else text[: width - 3] + "..."


def definition(job: Job, redactor: Redactor) -> str:
    """The job's settings as YAML (what jobs.yaml says after defaults are merged, defaults left out;
    the prompt is shown on its own), secrets masked, known secret values redacted."""
    data = job.spec.model_dump(mode="json", exclude_defaults=True, exclude={"prompt"})
    shown = {k: _masked(k, v) for k, v in data.items()}
    text = yaml.safe_dump(shown, sort_keys=False, allow_unicode=True, width=100) if shown else "{}  # every setting at its default\n"
    return redactor(text)


def prompt_text(job: Job) -> tuple[str | None, str]:
    """(the prompt, where it comes from): inline, a template file (its first ``PROMPT_CHARS``), or none."""
    spec = job.spec
    if spec.prompt is None:
        return None, "no prompt (a script-only job)" if not spec.agent else "no prompt"
    path = job.prompt_path()
    if path is None:
        return spec.prompt, "inline in jobs.yaml"
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return None, f"{path}: cannot read it ({exc.strerror or exc})"
    cut = len(text) > PROMPT_CHARS
    return text[:PROMPT_CHARS] + ("\n..." if cut else ""), f"template file {path}"


@dataclass(frozen=True)
class Spend:
    days: int
    runs: int
    failed: int
    cost_usd: float
    tokens: int


def spend(store: Store, job: str, now: datetime, days: int = SPEND_DAYS) -> Spend:
    """Top-level runs of ``job`` created in the last ``days`` UTC days (today included), as the charts count them."""
    since = (now - timedelta(days=days - 1)).date().isoformat()
    rows = [r for r in queries.daily_totals(store, since) if r.job == job]
    return Spend(
        days=days,
        runs=sum(r.runs for r in rows),
        failed=sum(r.failed for r in rows),
        cost_usd=sum(r.cost_usd for r in rows),
        tokens=sum(r.tokens for r in rows),
    )


def next_fires(job: Job, state: JobState | None, now: datetime, count: int = NEXT_FIRES) -> list[str]:
    if job.schedule_obj is None or not job.spec.enabled or (state is not None and state.paused):
        return []
    return [f.astimezone(UTC).isoformat(timespec="seconds") for f in upcoming(job, state or JobState(job=job.name), now, count)]


def downstream(jf: JobsFile, name: str) -> list[tuple[str, str]]:
    """(job, when) of every job chained ``after:`` this one."""
    return sorted(
        (other.name, str(other.spec.after.when))
        for other in jf.jobs.values()
        if other.spec.after is not None and name in other.spec.after.jobs
    )


def context(store: Store, jf: JobsFile, job: Job, state: JobState | None, now: datetime, redactor: Redactor) -> dict[str, Any]:
    """What ``job.html`` shows."""
    prompt, prompt_from = prompt_text(job)
    name = job.name
    return {
        "job": job,
        "st": state,
        "definition": definition(job, redactor),
        "prompt": redactor(prompt) if prompt is not None else None,
        "prompt_from": prompt_from,
        "fires": next_fires(job, state, now),
        "upstream": [(j, str(job.spec.after.when)) for j in job.spec.after.jobs] if job.spec.after else [],
        "downstream": downstream(jf, name),
        "followups": followups.pending(store, name),
        "strip": queries.strips(store, [name])[name],
        "recent": queries.runs_page(store, queries.RunFilter(job=name), limit=RECENT_RUNS).rows,
        "spend": spend(store, name, now),
        "var_defaults": [(k, _placeholder(k, v, redactor)) for k, v in sorted(job.spec.vars.items())],
    }
