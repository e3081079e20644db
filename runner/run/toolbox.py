"""The tools one run offers: the builtin registry, the operator's tools when the job names them,
and the MCP servers the job names (started here, before the first model request). A server that
does not start fails the run (``ToolsUnavailable``, reason ``tools_unavailable``) unless
config.yaml marks it ``optional: true``: then the run goes on without its tools, and an
``mcp_server`` event (status ``unavailable``) says so."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from runner.config.refs import is_ref, parse_ref
from runner.errors import ConfigError, ToolsUnavailable
from runner.events import Event
from runner.events import McpServer as ServerEvent
from runner.host import secrets
from runner.run.request import RunScope
from runner.tools import Registry, discover, known_toolset_names
from runner.tools._own import add_to

if TYPE_CHECKING:
    from runner.mcp.session import McpSession
    from runner.tools.context import ToolContext


@dataclass
class Toolbox:
    registry: Registry
    mcp: McpSession | None = None
    down: dict[str, str] = field(default_factory=dict)  # toolsets the run wanted but cannot offer, and why

    def close(self) -> None:
        if self.mcp is not None:
            self.mcp.close()


def open_toolbox(run: RunScope, ctx: ToolContext) -> Toolbox:
    """ConfigError for a broken tools file, an unknown MCP server or a single tool a server lacks."""
    toolsets = run.job.spec.toolsets
    registry = discover()
    builtin = known_toolset_names()
    if any(t not in builtin and not is_ref(t) for t in toolsets):
        loaded = run.settings.own_tools()
        if loaded.problems:
            raise ConfigError(list(loaded.problems))
        add_to(registry, loaded)
    refs = [t for t in toolsets if is_ref(t)]
    if not refs:
        return Toolbox(registry)
    from runner.mcp.session import McpSession

    session = McpSession(
        run.settings.config.mcp_servers, ctx.backend, run.emit, secrets.getenv, home=run.settings.home, job=run.job.name
    )
    try:
        session.add_to(registry, refs)
        _required_up(run, session.down)
    except BaseException:
        session.close()
        raise
    return Toolbox(registry, session, dict(session.down))


def _required_up(run: RunScope, down: dict[str, str]) -> None:
    """ToolsUnavailable naming each server that did not start and is not ``optional: true``; an
    event for each optional one that did not."""
    servers = run.settings.config.mcp_servers
    missing: list[str] = []
    for ref, why in down.items():
        name, _ = parse_ref(ref)
        reason = why.removeprefix("the server did not start: ").splitlines()[0] if why else "unknown"
        if servers[name].optional:
            run.emit(Event.MCP_SERVER, ServerEvent(name, "unavailable", error=f"optional: the run goes on without its tools ({reason})"))
        else:
            missing.append(f"MCP server {name} did not start: {reason}")
    if missing:
        raise ToolsUnavailable(
            f"job {run.job.name}: {'; '.join(missing)} (config.yaml mcp_servers: `optional: true` runs the job without it)"
        )
