"""The keep-alive bridge: ``python -m runner.mcp.bridge FILE``, started by serve (``runner.mcp.keep``).

It reads one JSON line from stdin (the stdio server's command, args, resolved env, cwd, start
timeout), starts the server once (``Connection``), and serves its tools as a streamable-HTTP MCP
endpoint on 127.0.0.1 (a port the kernel picks) that answers only requests carrying the random
bearer token. When the server answers, it writes ``{"pid", "url", "token"}`` to FILE (mode 0600).
The tool list goes through unchanged (annotations such as ``readOnlyHint`` included) and each
call's ``CallToolResult`` too: approvals, redaction and truncation happen in the run, as for any
MCP server. A server that died (a ping every 0.5 s fails at once, or a call
fails) is restarted at the next call; a restart that fails stops the bridge, so
the next runs start their own server. EOF on stdin (serve closed it, or died) stops the bridge
and its server.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import os
import secrets
import socket
import sys
import threading
from pathlib import Path
from typing import Any

from runner.host.procs import become_undumpable
from runner.mcp.client import Connection, McpFailure
from runner.mcp.launch import stdio_target
from runner.store.atomic import write_private

_CALL_TIMEOUT = 3600.0  # the run's client enforces the job's own call timeout


class Upstream:
    """The one stdio server behind the bridge, restarted when a call finds it dead."""

    def __init__(self, spec: dict[str, Any]):
        self.spec = spec
        self.connection: Connection | None = None
        self.failed = ""  # a restart failed: the bridge stops
        self._lock = threading.Lock()  # calls (in threads) and the watcher swap ``connection``

    def start(self) -> None:
        spec = self.spec
        target = stdio_target(spec["command"], list(spec["args"]), dict(spec["env"]), spec["cwd"])
        connection = Connection(spec["name"], target, start_timeout=float(spec["start_timeout"]))
        connection.start()
        self.connection = connection

    def call(self, name: str, arguments: dict[str, Any]) -> Any:
        import mcp_types as types

        try:
            with self._lock:
                connection = self._ready()
            return connection.call_raw(name, arguments, _CALL_TIMEOUT)
        except McpFailure as exc:
            self.drop_if_broken()
            return types.CallToolResult(content=[types.TextContent(type="text", text=str(exc))], is_error=True)

    def tools(self) -> list[Any]:
        """The server's tools as it lists them (a run starting after the server died restarts it)."""
        with self._lock:
            return list(self._ready().listed)

    def drop_if_broken(self) -> None:
        """Forget a server that died (between runs, or in a call): the next call restarts it."""
        connection = self.connection
        if connection is None or not connection.broken():
            return
        with self._lock:
            if self.connection is connection:
                self.connection = None
        connection.close()
        print(f"bridge: server {self.spec['name']} stopped answering", file=sys.stderr, flush=True)

    def _ready(self) -> Connection:
        if self.connection is not None and self.connection.alive():
            return self.connection
        if self.connection is not None:
            self.connection.close()
            self.connection = None
        print(f"bridge: server {self.spec['name']} is down; restarting it", file=sys.stderr, flush=True)
        try:
            self.start()
        except McpFailure as exc:
            self.failed = f"the restart failed: {exc}"
            raise McpFailure(self.failed) from None
        assert self.connection is not None
        return self.connection

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None


def _app(upstream: Upstream, token: str) -> Any:
    import mcp_types as types
    from mcp.server.lowlevel import Server

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=await asyncio.to_thread(upstream.tools))

    async def call_tool(ctx: Any, params: Any) -> Any:
        return await asyncio.to_thread(upstream.call, params.name, dict(params.arguments or {}))

    server: Any = Server(f"runner-bridge-{upstream.spec['name']}", on_list_tools=list_tools, on_call_tool=call_tool)
    inner = server.streamable_http_app()
    expected = f"Bearer {token}".encode()

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, expected):
                await send(
                    {"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]}
                )
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await inner(scope, receive, send)

    return guarded


def serve(path: Path, spec: dict[str, Any]) -> int:
    import uvicorn

    upstream = Upstream(spec)
    try:
        upstream.start()
    except McpFailure as exc:
        print(f"bridge: server {spec['name']} did not start: {exc}", file=sys.stderr, flush=True)
        return 1
    token = secrets.token_urlsafe(32)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(_app(upstream, token), log_level="warning", lifespan="on"))

    def watch_stdin() -> None:
        sys.stdin.read()  # until serve closes it
        server.should_exit = True

    def watch_upstream() -> None:  # a dead server is found between runs, not by a run's call
        while not server.should_exit:
            if upstream.failed:
                server.should_exit = True
            upstream.drop_if_broken()
            threading.Event().wait(0.5)

    threading.Thread(target=watch_stdin, daemon=True).start()
    threading.Thread(target=watch_upstream, daemon=True).start()
    # listening before the address is published: a run that connects while uvicorn still starts
    # waits in the backlog instead of being refused
    sock.listen(128)
    write_private(path, json.dumps({"pid": os.getpid(), "url": f"http://127.0.0.1:{port}/mcp", "token": token}))
    try:
        server.run(sockets=[sock])
    finally:
        upstream.close()
    return 0


def main(argv: list[str]) -> int:
    become_undumpable()  # it holds the server's variables
    line = sys.stdin.readline()
    if not line:
        return 0
    return serve(Path(argv[0]), json.loads(line))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
