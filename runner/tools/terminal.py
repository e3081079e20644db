"""The ``terminal`` tool: one shell command in the job's backend, after the approval check."""

from __future__ import annotations

from typing import Any

from runner.backends.base import truncate_text
from runner.tools import Registry, ToolError, ToolResult
from runner.tools.context import ToolContext

MAX_TIMEOUT = 3600.0


def terminal(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    command = args.get("command")
    if not isinstance(command, str) or not command.strip():
        raise ToolError("'command' must be a non-empty string")
    timeout = args.get("timeout", ctx.command_timeout)
    if not isinstance(timeout, int | float) or timeout <= 0:
        raise ToolError("'timeout' must be a positive number of seconds")
    decision = ctx.approve(command)
    if not decision.allowed:
        return ToolResult(decision.message, failed=True)
    result = ctx.backend.run(command, timeout=ctx.time_left(min(float(timeout), MAX_TIMEOUT)), env=ctx.step_env())
    head = f"exit code {result.exit_code}"
    if result.timed_out:
        head += f" (timed out after {result.duration_s:.0f}s; the command was killed)"
    output = truncate_text(result.output, ctx.output_chars)
    return ToolResult(f"{head}\n{output}" if output else head, failed=result.exit_code != 0)


def changes_files(args: dict[str, Any]) -> bool:
    """A command the read-only check cannot vouch for may change the workdir (a checkpoint first)."""
    from runner.safety.shell.readonly import read_only

    command = args.get("command")
    return not (isinstance(command, str) and read_only(command))


def register(registry: Registry) -> None:
    registry.tool(
        "terminal",
        "terminal",
        "Run a shell command in the job's working directory (a fresh shell each time; the working "
        "directory carries over, variables do not). Returns the exit code and combined output.",
        {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "shell command"},
                "timeout": {"type": "number", "description": "seconds, default 300"},
            },
            "required": ["command"],
            "additionalProperties": False,
        },
        changes_files=changes_files,
    )(terminal)
