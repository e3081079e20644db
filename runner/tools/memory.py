"""The ``memory`` tool (toolset ``memory``): add, replace or remove entries of the run's notebook.

The notebook is the job's own (``memory: job``, the default) or a shared one (``memory:
shared:NAME``); ``memory: off`` offers no tool. What the notebook held when the run started is in
the system prompt; writes are stored at once and seen from the next run on.
"""

from __future__ import annotations

from typing import Any

from runner.tools import Registry, ToolError, ToolResult
from runner.tools.context import ToolContext

DESCRIPTION = (
    "Your notebook, kept across runs of this job (its entries are in the system prompt). Save what "
    "a later run needs: facts about the environment, conventions, what worked or failed. Not task "
    "progress. add: a new entry. replace: the entry containing old_text becomes content. remove: "
    "delete the entry containing old_text. The notebook has a character cap; when full, consolidate "
    "(replace or remove) first. Changes apply from the next run."
)


def _offered(ctx: ToolContext) -> bool | str:
    return True if ctx.memory is not None else "memory: off for this job"


def memory(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    from runner.memory.notebook import Action, MemoryRefused
    from runner.memory.write import write

    binding = ctx.memory
    if binding is None:
        raise ToolError("memory is off for this job")
    try:
        action = Action(args.get("action"))
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
                "content": {"type": "string", "description": "the entry (add, replace)"},
                "old_text": {"type": "string", "description": "a unique piece of the entry (replace, remove)"},
            },
            "required": ["action"],
            "additionalProperties": False,
        },
        check_fn=_offered,
    )(memory)
