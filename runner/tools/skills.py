"""The ``skills`` toolset: ``skill_view`` (progressive disclosure) and ``skill_manage`` (writing).

Both work on the runner host (RUNNER_HOME and the skill folders), whatever the job's backend.
They need the run's ``SkillSession`` in ``ctx.skills``, which the run puts there.
"""

from __future__ import annotations

from typing import Any

from runner.skills import SkillError, SkillRefused
from runner.tools import Registry, ToolError, ToolResult, no_files
from runner.tools.context import ToolContext

ACTIONS = ["create", "edit", "patch", "write_file", "remove_file", "archive"]


def _session(ctx: ToolContext) -> Any:
    session = ctx.skills
    if session is None:
        raise ToolError("skills are not available in this run")
    return session


def _has_session(ctx: ToolContext) -> bool:
    return ctx.skills is not None


def skill_view(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    try:
        return ToolResult(str(_session(ctx).view(args["name"], args.get("file"))))
    except SkillError as exc:
        raise ToolError(str(exc)) from None


def skill_manage(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    action = args["action"]
    needs = {
        "create": ("content",),
        "edit": ("content",),
        "patch": ("find", "replace"),
        "write_file": ("file", "content"),
        "remove_file": ("file",),
    }
    missing = [k for k in needs.get(action, ()) if not isinstance(args.get(k), str)]
    if missing:
        raise ToolError(f"action {action!r} needs: {', '.join(missing)}")
    extra = {k: args[k] for k in ("content", "find", "replace", "file") if k in args}
    try:
        change = _session(ctx).manage(action, args["name"], **extra)
    except SkillRefused as exc:
        raise ToolError(f"{exc}. Nothing was written; fix the content and try again.") from None
    except SkillError as exc:
        raise ToolError(str(exc)) from None
    return ToolResult(str(change.message))


def register(registry: Registry) -> None:
    registry.tool(
        "skill_view",
        "skills",
        "Read a skill: its full SKILL.md (the procedure), or one of its supporting files. The skills "
        "available are listed by name in the system prompt.",
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "skill name from the index"},
                "file": {
                    "type": "string",
                    "description": "a supporting file, e.g. references/notes.md (omit for SKILL.md)",
                },
            },
            "required": ["name"],
            "additionalProperties": False,
        },
        check_fn=_has_session,
        read_only=True,
    )(skill_view)
    registry.tool(
        "skill_manage",
        "skills",
        "Save procedural memory as skills in RUNNER_HOME/skills. create: a new skill from a full SKILL.md "
        "(frontmatter with name and description, then the steps). edit: replace SKILL.md. patch: replace "
        "one exact piece of text (find must occur once). write_file / remove_file: a supporting file under "
        "references/, templates/, scripts/ or assets/. archive: retire a skill (it is kept, not deleted). "
        "Content is checked before it is written; a refusal says why.",
        {
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ACTIONS},
                "name": {"type": "string", "description": "skill name: lowercase letters, digits, . _ -"},
                "content": {"type": "string", "description": "create/edit: the whole SKILL.md; write_file: the file"},
                "find": {"type": "string", "description": "patch: exact text to replace"},
                "replace": {"type": "string", "description": "patch: the new text"},
                "file": {
                    "type": "string",
                    "description": "supporting file path, e.g. scripts/check.sh (patch: omit for SKILL.md)",
                },
            },
            "required": ["action", "name"],
            "additionalProperties": False,
        },
        check_fn=_has_session,
        changes_files=no_files,  # skills live under RUNNER_HOME
    )(skill_manage)
