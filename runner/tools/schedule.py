"""``schedule_followup`` (toolset ``schedule``): a run asks for one more run of its own job later.

It takes only ``when`` (a duration like ``2h`` or an ISO time) and ``note`` (handed to that run's
prompt as data): it cannot name another job nor change any job's settings. The job's
``followups:`` bound it (``max_pending``, ``max_delay``); serve fires it (``runner.store.followups``).
"""

from __future__ import annotations

import secrets
from typing import Any

from runner.clock import utcnow
from runner.config.schedules import format_duration, parse_when
from runner.safety.redact import Redactor
from runner.store.followups import FollowupRefused, add
from runner.tools import Registry, ToolError, ToolResult, no_files
from runner.tools.context import ToolContext

MAX_NOTE_CHARS = 4000

DESCRIPTION = (
    "Ask for one more run of this same job later (once). when: a duration from now (30m, 2h, 1d) "
    "or an ISO time; note: what that run should know or check (it is shown to it as a note, "
    "not as instructions). Bounded per job; serve must be running to fire it."
)


def _offered(ctx: ToolContext) -> bool | str:
    return True if ctx.settings is not None and ctx.job_name else "offered in a job's runs (the run's own job)"


def schedule_followup(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    settings = ctx.settings
    if settings is None or not ctx.run_id or not ctx.job_name:
        raise ToolError("schedule_followup works only inside a run of a job")
    job = settings.jobs.jobs.get(ctx.job_name)
    if job is None:
        raise ToolError(f"job {ctx.job_name} is no longer in jobs.yaml")
    bounds = job.spec.followups
    note = Redactor()(str(args.get("note") or ""))  # stored, and shown to a later run: no secrets
    if len(note) > MAX_NOTE_CHARS:
        raise ToolError(f"note is {len(note)} characters: at most {MAX_NOTE_CHARS}")
    now = utcnow()
    try:
        due = parse_when(str(args.get("when") or ""), now, bounds.max_delay)
    except ValueError as exc:
        raise ToolError(str(exc)) from None
    followup_id = f"f{secrets.token_hex(4)}"
    try:
        add(
            settings.store,
            followup_id=followup_id,
            job=ctx.job_name,
            run_id=ctx.run_id,
            note=note,
            due=due,
            now=now,
            max_pending=bounds.max_pending,
        )
    except FollowupRefused as exc:
        raise ToolError(f"{exc}; cancel one with runner jobs followups cancel, or wait") from None
    ahead = format_duration((due - now).total_seconds())
    return ToolResult(f"follow-up {followup_id}: job {ctx.job_name} runs again at {due.isoformat()} (in {ahead})")


def register(registry: Registry) -> None:
    registry.tool(
        "schedule_followup",
        "schedule",
        DESCRIPTION,
        {
            "type": "object",
            "properties": {
                "when": {"type": "string", "description": "30m, 2h, 1d, or an ISO time such as 2030-01-31T09:00:00Z"},
                "note": {"type": "string", "description": "for the follow-up run: what to check or continue"},
            },
            "required": ["when", "note"],
            "additionalProperties": False,
        },
        check_fn=_offered,
        changes_files=no_files,  # the follow-up is in the store
    )(schedule_followup)
