"""The MCP servers of one run: started when the run builds its tool list (before the first model
request, only for jobs whose ``toolsets:`` name ``mcp:`` entries), stopped with the run.

Each server tool becomes a ``ToolEntry`` named ``mcp__SERVER__TOOL`` in toolset ``mcp:SERVER``
(``mcp:SERVER/TOOL`` picks it alone). A call goes through the run's approval gate
(``ToolContext.approve_tool``): read-only tools (``readOnlyHint``) are safe, the others dangerous
unless the server's ``approvals:`` says otherwise; a hardline command in any string argument is
refused. A server that dies is restarted once (at the next call); the call that found it dead
is a tool error. Results are truncated here and redacted by the loop like every tool result.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.backends.base import truncate_text
from runner.backends.local import LocalBackend
from runner.config.mcp import McpServer, parse_ref
from runner.errors import ConfigError
from runner.events import Emit, Event
from runner.events import McpServer as ServerEvent
from runner.mcp.client import CallTimeout, Connection, McpFailure, RemoteTool
from runner.mcp.keep import find_bridge
from runner.mcp.launch import StdioHost, http_target, target_for
from runner.safety.result import ToolCheck
from runner.tools import ToolEntry, ToolResult, compact_json

if TYPE_CHECKING:
    from runner.tools import Registry
    from runner.tools.context import ToolContext

_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")


def model_name(server: str, tool: str) -> str:
    """The name the model sees: ``mcp__SERVER__TOOL`` (characters a model API refuses become ``_``)."""
    return f"mcp__{server}__{_UNSAFE.sub('_', tool)}"[:64]


@dataclass
class _Server:
    name: str
    config: McpServer
    connection: Connection | None = None
    tools: tuple[RemoteTool, ...] = ()
    restarted: bool = False
    failure: str = ""  # why it is down


@dataclass
class McpSession:
    """One run's servers. ``add_to`` starts the ones the job names; ``close`` stops them all."""

    servers: Mapping[str, McpServer]
    backend: Any
    emit: Emit
    getenv: Callable[[str], str | None]
    down: dict[str, str] = field(default_factory=dict)  # "mcp:SERVER" -> why its tools are missing
    home: Path | None = None  # with ``job``: where serve's keep-alive bridges are listed (runner.mcp.keep)
    job: str = ""
    _live: dict[str, _Server] = field(default_factory=dict)

    def add_to(self, registry: Registry, refs: Sequence[str]) -> None:
        """Start the servers ``refs`` (``mcp:SERVER[/TOOL]``) name and add their tools; ConfigError
        for a server config.yaml does not define or a single tool its server does not have."""
        wanted: dict[str, set[str] | None] = {}
        for ref in refs:
            server, tool = parse_ref(ref)
            if server not in self.servers:
                known = ", ".join(sorted(self.servers)) or "none configured"
                raise ConfigError(f"toolsets: {ref}: no MCP server {server!r} in config.yaml mcp_servers ({known})")
            names = wanted.setdefault(server, set())
            if tool is None or names is None:
                wanted[server] = None
            else:
                names.add(tool)
        for server, names in wanted.items():
            state = self._start(server)
            for entry in self._entries(state, names):
                registry.add(entry)

    def _start(self, name: str) -> _Server:
        state = self._live.get(name) or _Server(name, self.servers[name])
        self._live[name] = state
        try:
            self._connect(state)
        except McpFailure as exc:
            state.failure = str(exc)
            self.down[f"mcp:{name}"] = f"the server did not start: {exc}"
        return state

    def _connect(self, state: _Server) -> None:
        started = time.monotonic()
        connection, tools, where = self._bridged(state) or self._own(state)
        state.connection, state.failure = connection, ""
        state.tools = tools if not state.tools else state.tools
        seconds = round(time.monotonic() - started, 3)
        self.emit(Event.MCP_SERVER, ServerEvent(state.name, "started", where=where, tools=len(tools), seconds=seconds))

    def _own(self, state: _Server) -> tuple[Connection, tuple[RemoteTool, ...], str]:
        target, where = target_for(state.config, self.backend, self.getenv)
        connection = Connection(state.name, target, start_timeout=state.config.start_timeout)
        try:
            return connection, connection.start(), where
        except McpFailure as exc:
            self.emit(Event.MCP_SERVER, ServerEvent(state.name, "failed", where=where, error=str(exc)))
            raise

    def _bridged(self, state: _Server) -> tuple[Connection, tuple[RemoteTool, ...], str] | None:
        """serve's keep-alive bridge for this server, when it has one that answers (else None, and
        an event saying why the run starts its own server)."""

        config = state.config
        if self.home is None or not config.keep_alive or config.kind != "stdio":
            return None
        if isinstance(self.backend, StdioHost) and not isinstance(self.backend, LocalBackend):
            return None  # docker and ssh host the run's own server; serve keeps servers for local jobs

        address, why = find_bridge(self.home, self.job, state.name, config.start_timeout)
        if address is not None:
            target = http_target(address.url, {"Authorization": f"Bearer {address.token}"})
            connection = Connection(state.name, target, start_timeout=config.start_timeout)
            try:
                return connection, connection.start(), "bridge"
            except McpFailure as exc:
                why = f"the keep-alive bridge does not answer: {exc}"
        if why:
            self.emit(Event.MCP_SERVER, ServerEvent(state.name, "bridge_unavailable", error=why))
        return None

    def _entries(self, state: _Server, names: set[str] | None) -> Iterator[ToolEntry]:
        have = {t.name: t for t in state.tools}
        if names is not None and state.connection is not None:
            missing = sorted(names - set(have))
            if missing:
                listed = ", ".join(sorted(have)) or "no tools"
                raise ConfigError(
                    f"toolsets: mcp:{state.name}/{missing[0]}: server {state.name} has no tool {missing[0]!r} "
                    f"(it has: {listed})"
                )
        if state.connection is None:  # down: single tools named in the job still answer, with the reason
            stubs = [RemoteTool(n, f"MCP tool {n} of server {state.name}", {"type": "object"}, False) for n in names or ()]
            have = {t.name: t for t in stubs}
        for tool in have.values():
            if names is None or tool.name in names:
                yield self._entry(state, tool)

    def _entry(self, state: _Server, tool: RemoteTool) -> ToolEntry:
        name = model_name(state.name, tool.name)
        level = state.config.level_of(tool.name, tool.read_only)

        def handle(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
            return self._call(state, tool, name, level, args, ctx)

        return ToolEntry(
            name=name,
            toolset=f"mcp:{state.name}",
            description=tool.description or f"{tool.name} (MCP server {state.name})",
            parameters=tool.input_schema,
            handler=handle,
            source=f"mcp:{state.name}",
            alias=f"mcp:{state.name}/{tool.name}",
            read_only=tool.read_only,  # readOnlyHint: may run beside other read-only calls of a turn
        )

    def _call(
        self, state: _Server, tool: RemoteTool, name: str, level: str, args: dict[str, Any], ctx: ToolContext
    ) -> ToolResult:
        reason = f"is a tool of MCP server {state.name} that is not marked read-only"
        check = ToolCheck(name, level, reason, tuple(strings(args)), f"{name} {compact_json(args)}"[:4000])
        approval = ctx.approve_tool(check)
        if not approval.allowed:
            return ToolResult(approval.message, failed=True)
        try:
            connection = self._ready(state)
            outcome = connection.call(tool.name, args, ctx.time_left(state.config.call_timeout), cut=ctx.cut)
        except CallTimeout as exc:
            return ToolResult(f"error: MCP server {state.name}: {exc}", failed=True)
        except McpFailure as exc:
            self._note_crash(state, str(exc))
            return ToolResult(f"error: MCP server {state.name}: {exc}", failed=True)
        return ToolResult(truncate_text(outcome.text, ctx.output_chars), failed=outcome.is_error)

    def _ready(self, state: _Server) -> Connection:
        """The live connection, restarting a dead server once per run."""
        if state.connection is not None and state.connection.alive():
            return state.connection
        if state.connection is not None:
            self._note_crash(state, state.failure or "the server stopped")
        if state.restarted:
            raise McpFailure(f"not restarted again after it stopped twice ({state.failure or 'stopped'})")
        state.restarted = True
        self.emit(Event.MCP_SERVER, ServerEvent(state.name, "restarting", error=state.failure))
        self._connect(state)
        assert state.connection is not None
        return state.connection

    def _note_crash(self, state: _Server, why: str) -> None:
        connection = state.connection
        if connection is None or connection.answers():
            return
        state.failure = why
        state.connection = None
        connection.close()
        self.emit(Event.MCP_SERVER, ServerEvent(state.name, "crashed", error=why))

    def close(self) -> None:
        for state in self._live.values():
            if state.connection is not None:
                state.connection.close()
                state.connection = None
                self.emit(Event.MCP_SERVER, ServerEvent(state.name, "stopped"))


def strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value (the payloads the hardline check reads)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)
