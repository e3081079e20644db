"""One MCP server connection, on its own event-loop thread.

The agent loop is synchronous and the ``mcp`` SDK is async: each connection runs a private
asyncio loop in a daemon thread. One task on that loop holds the SDK's ``Client`` context open
(its task groups must be entered and left by the same task) until ``close()``; every call is
``asyncio.run_coroutine_threadsafe(...).result(timeout)`` from the caller's thread, so nothing
waits longer than its timeout. The SDK is imported here, only when a connection starts.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import tempfile
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runner.host.procs import Cut, wait_or_cut

Target = Callable[[Any], Any]  # (a file for the server's stderr) -> the transport ``mcp.Client`` connects to


class McpFailure(Exception):
    """The server could not start, or a call failed outside the tool (a closed connection, a
    protocol error); the message says why in one line."""


class CallTimeout(McpFailure):
    pass


@dataclass(frozen=True)
class RemoteTool:
    name: str  # as the server names it
    description: str
    input_schema: dict[str, Any]
    read_only: bool  # annotated readOnlyHint


@dataclass(frozen=True)
class CallOutcome:
    text: str
    is_error: bool


class Connection:
    """A started server: ``start()`` (spawn or connect, handshake, list tools), ``call()``, ``close()``."""

    def __init__(self, label: str, target: Target, *, start_timeout: float):
        self.label = label
        self._target = target
        self._start_timeout = start_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._main: concurrent.futures.Future[None] | None = None
        self._stop: asyncio.Event | None = None
        self._client: Any = None
        self.listed: list[Any] = []  # the server's tools as the SDK gave them (a bridge serves them on)
        self._ended: str = ""  # why the connection ended on its own
        self._finished = threading.Event()  # the holding task has left the SDK's context
        self._errlog: Any = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")  # noqa: SIM115 - closed by close()

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> tuple[RemoteTool, ...]:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name=f"mcp-{self.label}", daemon=True)
        self._thread.start()
        ready: concurrent.futures.Future[tuple[RemoteTool, ...]] = concurrent.futures.Future()
        self._main = asyncio.run_coroutine_threadsafe(self._hold(ready), loop)
        try:
            return ready.result(timeout=self._start_timeout)
        except concurrent.futures.TimeoutError:
            self.close()
            raise McpFailure(f"handshake timeout: no answer within {self._start_timeout:g}s{self._stderr()}") from None
        except McpFailure:
            self.close()
            raise

    async def _hold(self, ready: concurrent.futures.Future[tuple[RemoteTool, ...]]) -> None:
        from mcp import Client

        self._stop = asyncio.Event()
        try:
            async with Client(self._target(self._errlog), mode="legacy") as client:
                tools = await _list_tools(client, self.listed)
                self._client = client
                ready.set_result(tools)
                await self._stop.wait()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # the SDK's task groups raise groups: explain the first leaf
            why = explain(exc) + self._stderr()
            self._ended = why
            if not ready.done():
                ready.set_exception(McpFailure(why))
        finally:
            self._client = None
            if not ready.done():
                ready.set_exception(McpFailure("the connection ended before the handshake"))
            self._finished.set()

    def alive(self) -> bool:
        return self._client is not None and self._main is not None and not self._main.done()

    def answers(self, timeout: float = 3.0) -> bool:
        """Whether the server still answers a ping (a failed call may have been the server dying)."""
        client, loop = self._client, self._loop
        if client is None or loop is None or not self.alive():
            return False
        with warnings.catch_warnings():  # ping is legacy-only in the SDK: this connection is legacy
            warnings.simplefilter("ignore")
            ping = client.send_ping()
        future = asyncio.run_coroutine_threadsafe(ping, loop)
        try:
            future.result(timeout=timeout)
        except Exception:
            future.cancel()
            return False
        return True

    def broken(self, timeout: float = 3.0) -> bool:
        """Whether a ping fails at once (the server's end is closed: it died). A ping that is only
        slow (a server busy with a long call) is not a broken connection."""
        client, loop = self._client, self._loop
        if client is None or loop is None or not self.alive():
            return True
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ping = client.send_ping()
        future = asyncio.run_coroutine_threadsafe(ping, loop)
        try:
            future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            return False
        except Exception:
            return True
        return False

    def close(self) -> None:
        """Stop the server (the SDK closes its stdin, then terminates it) and the loop thread."""
        loop, main = self._loop, self._main
        if loop is None or loop.is_closed():
            return
        if main is not None and not main.done():
            stop = self._stop
            if self._client is not None and stop is not None:
                loop.call_soon_threadsafe(stop.set)
                self._finished.wait(timeout=5.0)
            if not self._finished.is_set():  # still in the handshake, or not stopping: cancel it
                main.cancel()
                self._finished.wait(timeout=5.0)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        if not loop.is_running():
            loop.close()
        if self._errlog is not None:
            self._errlog.close()
            self._errlog = None

    # -- calls -------------------------------------------------------------------------------
    def call(self, tool: str, arguments: dict[str, Any], timeout: float, *, cut: Cut | None = None) -> CallOutcome:
        return render(self.call_raw(tool, arguments, timeout, cut=cut))

    def call_raw(self, tool: str, arguments: dict[str, Any], timeout: float, *, cut: Cut | None = None) -> Any:
        """The SDK's ``CallToolResult`` as the server sent it. A call still going when the run's
        ``cut`` is set is cancelled (``CallTimeout``): the run ends at once."""
        client, loop = self._client, self._loop
        if client is None or loop is None or not self.alive():
            raise McpFailure(f"the server is not running ({self._ended or 'stopped'})")
        future = asyncio.run_coroutine_threadsafe(client.call_tool(tool, arguments, read_timeout_seconds=timeout), loop)
        if not wait_or_cut(lambda seconds: bool(concurrent.futures.wait([future], seconds).done), timeout + 1.0, cut):
            future.cancel()
            if cut is not None and cut.is_set():
                raise CallTimeout("cancelled: the run was cut")
            raise CallTimeout(f"no answer within {timeout:g}s")
        try:
            result = future.result()
        except Exception as exc:
            raise McpFailure(explain(exc) + self._stderr()) from None
        return result

    def _stderr(self) -> str:
        """The last lines the server wrote to stderr (a stdio server's own reason), or ""."""
        log = self._errlog
        if log is None:
            return ""
        try:
            log.seek(0, os.SEEK_END)
            size = log.tell()
            log.seek(max(0, size - 600))
            tail = " | ".join(line.strip() for line in log.read().splitlines()[-3:] if line.strip())
        except (OSError, ValueError):
            return ""
        return f" (server stderr: {tail})" if tail else ""


async def _list_tools(client: Any, raw: list[Any]) -> tuple[RemoteTool, ...]:
    out: list[RemoteTool] = []
    cursor: str | None = None
    while True:
        page = await client.list_tools(cursor=cursor) if cursor else await client.list_tools()
        raw.extend(page.tools)
        for tool in page.tools:
            notes = tool.annotations
            out.append(
                RemoteTool(
                    name=tool.name,
                    description=tool.description or tool.title or "",
                    input_schema=dict(tool.input_schema or {"type": "object", "properties": {}}),
                    read_only=bool(notes is not None and notes.read_only_hint),
                )
            )
        cursor = getattr(page, "next_cursor", None)
        if not cursor:
            return tuple(out)


def explain(exc: BaseException) -> str:
    """One line for an SDK failure: the first leaf of an exception group, a missing command named."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, FileNotFoundError):
        return f"command not found: {exc.filename or exc}"
    if isinstance(exc, PermissionError):
        return f"command cannot be run: {exc.filename or exc}"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text if type(exc).__name__ in text else f"{type(exc).__name__}: {text}"


def render(result: Any) -> CallOutcome:
    """A ``CallToolResult`` as text: text blocks as they are, other blocks named, structured
    content as JSON when there is nothing else."""
    parts: list[str] = []
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind}: {block.mime_type}, about {len(block.data) * 3 // 4} bytes, not shown]")
        elif kind == "resource":
            text = getattr(block.resource, "text", None)
            parts.append(text if isinstance(text, str) else f"[binary resource {block.resource.uri}, not shown]")
        elif kind == "resource_link":
            parts.append(f"[resource link {block.uri}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    return CallOutcome("\n".join(parts), bool(result.is_error))
