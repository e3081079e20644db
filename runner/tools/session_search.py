"""``session_search`` (toolset ``session_search``): full-text search over past runs' prompts, answers,
tool calls and results, all redacted; the model's side of ``runner runs search``."""

from __future__ import annotations

from typing import Any

from runner.store.search import MAX_LIMIT, QueryError, Search, search
from runner.tools import Registry, ToolError, ToolResult
from runner.tools.context import ToolContext

DEFAULT_LIMIT = 5


def offered(ctx: ToolContext) -> bool | str:
    return True if ctx.settings is not None else "no run ledger in this context"


def session_search(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    assert ctx.settings is not None  # offered() holds
    limit = args.get("limit", DEFAULT_LIMIT)
    if not 1 <= limit <= MAX_LIMIT:
        raise ToolError(f"'limit' must be between 1 and {MAX_LIMIT}")
    q = Search(
        str(args["query"]),
        job=args.get("job") or None,
        limit=limit,
        raw=bool(args.get("raw", False)),
        exclude_run=ctx.run_id or None,
    )
    try:
        hits = search(ctx.settings.store, q)
    except QueryError as exc:
        raise ToolError(str(exc)) from None
    if not hits:
        where = f" in job {q.job!r}" if q.job else ""
        return ToolResult(f"no past runs match {q.text!r}{where}")
    lines = [f"{len(hits)} past run(s) match {q.text!r}, best and newest first:"]
    for h in hits:
        what = f"{h.kind} ({h.label})" if h.label else h.kind
        lines.append(f"- run {h.run_id}, job {h.job}, {h.ts[:16].replace('T', ' ')} UTC, {what}: {h.snippet}")
    return ToolResult("\n".join(lines))


def register(registry: Registry) -> None:
    registry.tool(
        "session_search",
        "session_search",
        "Search earlier runs (of every job, or of one) for words: their prompts, your answers, tool calls "
        "and tool results. Returns one passage per run with its run id, job and date, best and newest "
        "first; matching words are marked «like this». All words must occur; 'word*' matches a prefix. "
        "Secrets were removed before anything was stored.",
        {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "words to find, e.g. 'disk full backup'"},
                "job": {"type": "string", "description": "only runs of this job"},
                "limit": {"type": "integer", "description": f"how many runs (default {DEFAULT_LIMIT}, at most 50)"},
                "raw": {
                    "type": "boolean",
                    "description": 'use SQLite FTS5 query syntax (OR, NOT, NEAR, "phrases") instead of plain words',
                },
            },
            "required": ["query"],
            "additionalProperties": False,
        },
        check_fn=offered,
        read_only=True,
    )(session_search)
