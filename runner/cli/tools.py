"""``runner tools list``: every tool a job may name, its toolset, where it comes from, and whether
it is available (and why not)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from runner.cli._complete import job_names
from runner.cli._util import echo_json, settings, table

if TYPE_CHECKING:
    from runner.config.jobs import Job
    from runner.settings import Settings
    from runner.tools import Registry
    from runner.tools.context import ToolContext


@click.group("tools")
def tools_group() -> None:
    """The tools a model may be given: builtin, the operator's own, MCP servers'."""


class _Where:
    """The backend as the listing knows it: the job's spec and workdir, nothing started."""

    def __init__(self, workdir: str, spec: Any = None):
        self.workdir = workdir
        self.spec = spec


@tools_group.command("list")
@click.option("--job", "job_name", shell_complete=job_names, help="only the tools this job's toolsets pick, judged for this job")
@click.option("--json", "as_json", is_flag=True)
def tools_list(job_name: str | None, as_json: bool) -> None:
    """List the tools with their toolset, source (builtin, mcp:SERVER, operator FILE) and availability.

    MCP servers are started on this host to list their tools (a job's Docker or SSH backend
    is not started); a server that does not start is listed with the reason. Exit 2 when an
    operator tools file is broken.
    """
    from runner.tools import discover
    from runner.tools.context import ToolContext

    s = settings()
    job = s.jobs.get(job_name) if job_name else None
    registry = discover()
    problems = _add_own(s, registry)
    ctx = ToolContext(
        backend=_Where(str(job.workdir) if job else str(Path.cwd()), job.spec.backend if job else None),  # type: ignore[arg-type]
        job_name=job_name or "",
        settings=s,
    )
    if job is not None:
        ctx = replace(ctx, web=job.spec.web.policy())
    down = _add_mcp(s, registry, ctx, job)
    rows = _rows(registry, ctx, job, down)
    if as_json:
        echo_json({"tools": rows, "problems": problems})
    else:
        table(
            [[r["name"], r["toolset"], r["source"], "yes" if r["available"] else "no", r["why_not"]] for r in rows],
            ["TOOL", "TOOLSET", "SOURCE", "AVAILABLE", "WHY NOT"],
        )
        for p in problems:
            click.echo(p, err=True)
    if problems:
        sys.exit(2)


def _add_own(s: Settings, registry: Registry) -> list[str]:
    from runner.tools._own import add_to

    loaded = s.own_tools()
    add_to(registry, loaded)
    return list(loaded.problems)


def _add_mcp(s: Settings, registry: Registry, ctx: ToolContext, job: Job | None) -> dict[str, str]:
    """Start the configured servers (the job's only, with ``--job``) on this host, add their tools,
    stop them; {"mcp:SERVER": why} for those that did not start."""
    from runner.config.refs import is_ref, parse_ref
    from runner.host import secrets

    servers = s.config.mcp_servers
    if job is not None:
        names = {parse_ref(t)[0] for t in job.spec.toolsets if is_ref(t)}
        servers = {n: c for n, c in servers.items() if n in names}
    if not servers:
        return {}
    from runner.mcp.session import McpSession

    session = McpSession(servers, ctx.backend, lambda kind, payload: None, secrets.getenv)
    try:
        session.add_to(registry, [f"mcp:{name}" for name in servers])
    finally:
        session.close()
    return dict(session.down)


def _rows(registry: Registry, ctx: ToolContext, job: Job | None, down: dict[str, str]) -> list[dict[str, Any]]:
    from runner.tools import listing_order

    wanted = set(job.spec.toolsets) if job is not None else None
    rows = []
    for entry in sorted(registry.entries.values(), key=listing_order):
        if wanted is not None and not entry.picked_by(wanted):
            continue
        why = entry.unavailable_reason(ctx)
        rows.append(
            {"name": entry.name, "toolset": entry.toolset, "source": entry.source, "available": why is None, "why_not": why or ""}
        )
    for toolset, why in sorted(down.items()):
        rows.append({"name": f"{toolset} (all)", "toolset": toolset, "source": toolset, "available": False, "why_not": why})
    return rows


COMMANDS = [tools_group]
