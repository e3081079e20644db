"""``delegate_task`` (toolset ``delegate``, off unless a job lists it): hand sub-tasks to subagents.

Each goal becomes a child agent with a fresh context and its own run in the ledger; only its
final summary comes back as this tool's result. The work (child runs, budget slices, threads)
is the run's ``Delegator`` (runner/run/delegate.py); this module is the model-facing side.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from runner.tools import Registry, ToolError, ToolResult
from runner.tools.context import ToolContext

MAX_GOALS = 9  # per call; at most ``delegation.max_children`` of them run at once
MAX_GOAL_CHARS = 8_000
MAX_CONTEXT_CHARS = 32_000


@dataclass(frozen=True)
class ChildReport:
    """What one subagent gives back: its run, how it ended, and its final summary."""

    run_id: str
    status: str
    summary: str
    reason: str | None
    iterations: int
    tokens: int
    cost_usd: float


class Delegator(Protocol):
    """Runs subagents for a run (``ToolContext.delegate``)."""

    def delegate(
        self, goals: Sequence[str], context: str, toolsets: Sequence[str] | None, ctx: ToolContext
    ) -> list[ChildReport]: ...


def offered(ctx: ToolContext) -> bool | str:
    if ctx.delegate is None:
        return "subagents are not available here (a subagent at delegation.max_depth cannot delegate)"
    return True


def delegate_task(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    if ctx.delegate is None:
        raise ToolError("delegate_task is not available in this run")
    goals = _goals(args.get("goal"))
    context = args.get("context") or ""
    if not isinstance(context, str) or len(context) > MAX_CONTEXT_CHARS:
        raise ToolError(f"'context' must be text of at most {MAX_CONTEXT_CHARS} characters")
    toolsets = args.get("toolsets")
    if toolsets is not None and (not isinstance(toolsets, list) or not all(isinstance(t, str) for t in toolsets)):
        raise ToolError("'toolsets' must be a list of toolset or tool names")
    reports = ctx.delegate.delegate(goals, context, toolsets, ctx)
    return ToolResult(render(reports), failed=all(r.status != "succeeded" for r in reports))


def _goals(value: Any) -> list[str]:
    goals = [value] if isinstance(value, str) else value
    if not isinstance(goals, list) or not goals or not all(isinstance(g, str) and g.strip() for g in goals):
        raise ToolError("'goal' must be a non-empty text or a list of them")
    if len(goals) > MAX_GOALS:
        raise ToolError(f"at most {MAX_GOALS} goals per call (got {len(goals)})")
    if any(len(g) > MAX_GOAL_CHARS for g in goals):
        raise ToolError(f"a goal may have at most {MAX_GOAL_CHARS} characters; put details in 'context'")
    return [g.strip() for g in goals]


def render(reports: Sequence[ChildReport]) -> str:
    """Each child's summary under a header line: which run, how it ended, what it cost."""
    blocks = []
    for i, r in enumerate(reports, 1):
        how = r.status if r.status == "succeeded" else f"{r.status} ({r.reason or 'stopped'}; partial summary)"
        head = f"[subagent {i}/{len(reports)}, run {r.run_id}: {how}; {r.iterations} turns, {r.tokens} tokens, ${r.cost_usd:.4f}]"
        blocks.append(f"{head}\n{r.summary.strip() or '(no summary)'}")
    return "\n\n".join(blocks)


def register(registry: Registry) -> None:
    registry.tool(
        "delegate_task",
        "delegate",
        "Hand a self-contained sub-task to a subagent with a fresh context and get back only its final "
        "summary. Give a list of goals to run several subagents in parallel. The subagent sees only "
        "the goal and 'context' (not this conversation), so include the paths, facts and constraints "
        "it needs. It cannot delegate further, write memory or skills, or use kanban tools.",
        {
            "type": "object",
            "properties": {
                "goal": {
                    "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
                    "description": "what the subagent should achieve; a list runs one subagent per goal",
                },
                "context": {"type": "string", "description": "background the subagent needs"},
                "toolsets": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "limit the subagent to these of your toolsets or tools (default: all allowed)",
                },
            },
            "required": ["goal"],
            "additionalProperties": False,
        },
        check_fn=offered,
    )(delegate_task)
