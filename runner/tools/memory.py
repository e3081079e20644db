"""The ``memory`` tool (toolset ``memory``): add, replace or remove entries of the run's notebook.

The notebook is the job's own (``memory: job``, the default) or a shared one (``memory:
shared:NAME``); ``memory: off`` offers no tool. What the notebook held when the run started is in
the system prompt; writes are stored at once and seen from the next run on.
"""

from __future__ import annotations

from typing import Any

from runner.memory.notebook import Action, MemoryRefused
from runner.memory.write import write
from runner.tools import Registry, ToolError, ToolResult, no_files
from runner.tools.context import ToolContext

DESCRIPTION = (
    "Your notebook across runs (in the system prompt at run start). Keep durable facts a later run "
    "needs, not task progress. add: a new entry; replace / remove: the entry containing old_text. "
    "When full, consolidate first. Changes apply from the next run."
)


def _offered(ctx: ToolContext) -> bool | str:
    """A run binds its notebook unless the job has ``memory: off``; a listing (no run) asks the job."""
    if ctx.memory is not None:
        return True
    if not ctx.job_name:
        return "offered in a job's runs unless the job has memory: off"
    if not ctx.run_id and ctx.settings is not None:
        job = ctx.settings.jobs.jobs.get(ctx.job_name)
        if job is not None and job.spec.memory != "off":
            return True
    return "memory: off for this job"


def memory(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    binding = ctx.memory
    if binding is None:
        raise ToolError("memory is off for this job")
    try:
        action = Action(str(args.get("action")))
    except ValueError:
        raise ToolError("action must be add, replace or remove") from None
    content, old_text = args.get("content"), args.get("old_text")
    if action != Action.REMOVE and not isinstance(content, str):
        raise ToolError(f"action {action} needs content")
    if action != Action.ADD and not isinstance(old_text, str):
        raise ToolError(f"action {action} needs old_text (a short piece of the entry to change)")
    try:
        return ToolResult(write(binding, action, content or "", old_text or "", ctx.emit))
    except MemoryRefused as exc:
        raise ToolError(str(exc)) from None


def register(registry: Registry) -> None:
    registry.tool(
        "memory",
        "memory",
        DESCRIPTION,
        {
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["add", "replace", "remove"]},
                "content": {"type": "string"},
                "old_text": {"type": "string", "description": "a unique part of the entry"},
            },
            "required": ["action"],
            "additionalProperties": False,
        },
        check_fn=_offered,
        changes_files=no_files,  # the notebook is in the store
    )(memory)
