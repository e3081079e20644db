"""A real HTTP server speaking Anthropic's Messages API (POST /v1/messages), scripted per test.

The counterpart of ``fakeopenai.py`` for ``profile: anthropic`` providers. A script is a list of
replies consumed in order: text, tool calls (``tool_use``), thinking with its signature, an HTTP
error with Anthropic's error body and headers, a hang. Every request is logged (body, headers,
the ``x-api-key`` used, the usage the server worked out).

What the server checks, as the API does (a failed check is a 400 ``invalid_request_error``):
``anthropic-version`` is sent, ``max_tokens`` is set, roles alternate from ``user``, each
``tool_result`` answers a ``tool_use`` of the turn before and each ``tool_use`` is answered,
at most 4 ``cache_control`` breakpoints, thinking blocks come back with the signature this
server gave them.

Prompt caching is worked out the way the API describes it
(https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching): the prompt is the
sequence tools -> system -> messages, block by block; a ``cache_control`` breakpoint caches the
prefix up to and including its block. A request reads the longest prefix cached by an earlier
request at or up to 20 blocks before one of its breakpoints (``cache_read_input_tokens``),
writes what is new up to its last breakpoint (``cache_creation_input_tokens``), and pays the rest
as ``input_tokens``. Prefixes shorter than ``min_cache_tokens`` (1024 by default, Sonnet's
minimum) are never cached. Tokens are counted as len(JSON) / 4 of each block.

Standard library only; ``python -m runner.testing.fakeanthropic`` serves "ok" for manual tries.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LOOKBACK = 20  # blocks before a breakpoint the API checks for an earlier cache entry
MAX_BREAKPOINTS = 4


@dataclass
class Reply:
    """One scripted answer: 200 with text / tool uses / thinking, or an error status, or a hang."""

    status: int = 200
    text: str | None = None
    tool_uses: list[tuple[str, Any]] = field(default_factory=list)
    thinking: str | None = None  # a thinking block ahead of the rest, signed by the server
    redacted: str | None = None  # a redacted_thinking block's data
    stop_reason: str | None = None  # default: tool_use with tool uses, else end_turn
    output_tokens: int = 20
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None  # an error's body
    hang: float = 0.0
    keys: tuple[str, ...] | None = None  # only answer this way for these keys
    chunk: int = 16  # characters per streamed delta
    pings: int = 1  # ping events after message_start
    delay: float = 0.0  # seconds between streamed events (a slow generation)
    error_after: int | None = None  # a streamed answer sends an ``error`` event after this many events
    cut_after: int | None = None  # a streamed answer's connection drops after this many events


def text(content: str, output_tokens: int = 20) -> Reply:
    """A final answer."""
    return Reply(text=content, output_tokens=output_tokens)


def tool(name: str, args: Any = None, *more: tuple[str, Any], say: str | None = None) -> Reply:
    """A turn that calls tool ``name`` with ``args`` (then ``more``), after the text ``say``."""
    return Reply(text=say, tool_uses=[(name, args if args is not None else {}), *more])


def thinking(thought: str, reply: Reply) -> Reply:
    """``reply`` with a thinking block ahead of it."""
    return replace(reply, thinking=thought)


def error(status: int, kind: str, message: str, headers: dict[str, str] | None = None, **kw: Any) -> Reply:
    """An HTTP error with Anthropic's error body
    (https://docs.anthropic.com/en/api/errors: ``{"type": "error", "error": {"type", "message"}}``)."""
    body = {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_fake"}
    return Reply(status=status, body=body, headers=headers or {}, **kw)


def signature_of(thought: str) -> str:
    """The signature this server gives a thinking block (and checks when it comes back)."""
    return "sig-" + hashlib.sha256(thought.encode()).hexdigest()[:24]


class Invalid(ValueError):
    """A request the API would answer with 400 invalid_request_error."""


class FakeAnthropic:
    """The server: ``start()`` it, use ``base_url`` as the provider's ``base_url``, ``add()`` replies."""

    def __init__(self, *, min_cache_tokens: int = 1024) -> None:
        self.script: list[Reply] = []
        self.default: Reply | None = None
        self.requests: list[dict[str, Any]] = []
        self.min_cache_tokens = min_cache_tokens
        self.cached: set[str] = set()  # hashes of cached prefixes
        self.lock = threading.Lock()
        self._counter = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def handle(self) -> None:
                try:
                    super().handle()
                except (ConnectionResetError, BrokenPipeError):
                    return

            def log_message(self, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                server._handle(self, self.rfile.read(length))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def start(self) -> FakeAnthropic:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def add(self, *replies: Reply) -> FakeAnthropic:
        with self.lock:
            self.script.extend(replies)
        return self

    def keys_used(self) -> list[str | None]:
        return [r["key"] for r in self.requests]

    def _next(self, key: str | None) -> Reply:
        with self.lock:
            for i, reply in enumerate(self.script):
                if reply.keys is None or key in reply.keys:
                    return self.script.pop(i)
            if self.default is not None:
                return self.default
        return error(500, "api_error", "fake server: script exhausted")

    # -- a request ---------------------------------------------------------------------------

    def _handle(self, handler: BaseHTTPRequestHandler, raw: bytes) -> None:
        key = handler.headers.get("x-api-key")
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        entry: dict[str, Any] = {
            "body": body,
            "key": key,
            "path": handler.path,
            "headers": {k.lower(): v for k, v in handler.headers.items()},
            "stream": isinstance(body, dict) and body.get("stream") is True,
            "time": time.time(),
        }
        reply = self._next(key)
        with self.lock:
            self._counter += 1
            n = self._counter
            self.requests.append(entry)
            try:
                if handler.path.rstrip("/") != "/v1/messages":
                    reply = error(404, "not_found_error", f"no route {handler.path}")
                elif reply.status == 200:
                    self._check(entry["headers"], body)
                    entry["usage"] = self._usage(body)  # the cache only changes for a request answered
            except Invalid as exc:
                reply = error(400, "invalid_request_error", str(exc))
            entry["status"] = reply.status
        if reply.hang:
            time.sleep(reply.hang)
        try:
            if reply.status != 200:
                self._send(handler, reply.status, json.dumps(reply.body).encode(), reply.headers)
            elif entry["stream"]:
                self._stream(handler, reply, body, n, entry["usage"])
            else:
                message = self._message(reply, body, n, entry["usage"])
                self._send(handler, 200, json.dumps(message).encode(), reply.headers)
        except (BrokenPipeError, ConnectionResetError):
            return

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, payload: bytes, headers: dict[str, str]) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(payload)))
        handler.send_header("request-id", "req_fake")
        for k, v in headers.items():
            handler.send_header(k, v)
        handler.end_headers()
        handler.wfile.write(payload)

    # -- what the API checks -----------------------------------------------------------------

    @staticmethod
    def _check(headers: dict[str, str], body: Any) -> None:
        if not headers.get("anthropic-version"):
            raise Invalid("anthropic-version: header is required")
        if not isinstance(body, dict) or not isinstance(body.get("max_tokens"), int):
            raise Invalid("max_tokens: Field required")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise Invalid("messages: at least one message is required")
        marks = sum(1 for _, marked in _blocks(body) if marked)
        if marks > MAX_BREAKPOINTS:
            raise Invalid(f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {marks}.")
        expected = "user"
        pending: set[Any] = set()
        for i, m in enumerate(messages):
            role = m.get("role")
            if role != expected:
                raise Invalid(
                    f"messages.{i}.role: expected {expected!r} (roles must alternate, from 'user'), got {role!r}"
                )
            content = m.get("content")
            blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
            if role == "user":
                answered = {b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"}
                if answered - pending:
                    raise Invalid(f"messages.{i}: tool_result for unknown tool_use ids {sorted(map(str, answered - pending))}")
                if pending - answered:
                    raise Invalid(f"messages.{i}: tool_use ids {sorted(map(str, pending - answered))} have no tool_result")
                pending = set()
            else:
                for b in blocks:
                    if b.get("type") == "thinking" and b.get("signature") != signature_of(str(b.get("thinking", ""))):
                        raise Invalid(f"messages.{i}: Invalid `signature` in `thinking` block")
                    if b.get("type") == "text" and not b.get("text"):
                        raise Invalid(f"messages.{i}: text content blocks must be non-empty")
                pending = {b.get("id") for b in blocks if b.get("type") == "tool_use"}
            expected = "assistant" if role == "user" else "user"

    # -- prompt caching ----------------------------------------------------------------------

    def _usage(self, body: dict[str, Any]) -> dict[str, int]:
        """input / cache write / cache read tokens of a request (see the module docstring); the
        prefixes at its breakpoints are cached for later requests."""
        blocks = _blocks(body)
        seed = hashlib.sha256(str(body.get("model")).encode())
        hashes, totals, chars = [], [], 0
        for text_, _ in blocks:
            seed.update(text_.encode())
            hashes.append(seed.copy().hexdigest())
            chars += len(text_)
            totals.append(chars // 4)
        marks = [i for i, (_, marked) in enumerate(blocks) if marked and totals[i] >= self.min_cache_tokens]
        read = 0
        for mark in marks:
            for j in range(mark, max(-1, mark - LOOKBACK - 1), -1):
                if hashes[j] in self.cached:
                    read = max(read, totals[j])
                    break
        written = max(0, totals[marks[-1]] - read) if marks else 0
        for mark in marks:
            self.cached.add(hashes[mark])
        total = totals[-1] if totals else 0
        return {
            "input_tokens": max(1, total - read - written),
            "cache_creation_input_tokens": written,
            "cache_read_input_tokens": read,
        }

    # -- the answer --------------------------------------------------------------------------

    @staticmethod
    def _content(reply: Reply, n: int) -> list[dict[str, Any]]:
        """The reply's content blocks (shapes: https://docs.anthropic.com/en/api/messages, the
        ``content`` of a Message; thinking: .../build-with-claude/extended-thinking)."""
        out: list[dict[str, Any]] = []
        if reply.thinking is not None:
            out.append({"type": "thinking", "thinking": reply.thinking, "signature": signature_of(reply.thinking)})
        if reply.redacted is not None:
            out.append({"type": "redacted_thinking", "data": reply.redacted})
        if reply.text:
            out.append({"type": "text", "text": reply.text})
        for i, (name, args) in enumerate(reply.tool_uses):
            value = json.loads(args) if isinstance(args, str) else args
            out.append({"type": "tool_use", "id": f"toolu_{n:02d}{i}fake", "name": name, "input": value})
        return out

    def _message(self, reply: Reply, body: dict[str, Any], n: int, usage: dict[str, int]) -> dict[str, Any]:
        """A whole Message (https://docs.anthropic.com/en/api/messages, the 200 response)."""
        return {
            "id": f"msg_fake{n:04d}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "claude-fake"),
            "content": self._content(reply, n),
            "stop_reason": _stop(reply),
            "stop_sequence": None,
            "usage": {**usage, "output_tokens": reply.output_tokens},
        }

    def _events(self, reply: Reply, body: dict[str, Any], n: int, usage: dict[str, int]) -> list[dict[str, Any]]:
        """The stream's events in the documented order
        (https://docs.anthropic.com/en/docs/build-with-claude/streaming, "Event flow"):
        message_start (a Message with empty content), ping, then per content block
        content_block_start / content_block_delta... / content_block_stop, then message_delta
        (stop_reason, cumulative usage) and message_stop."""
        start = self._message(reply, body, n, usage)
        start.update(content=[], stop_reason=None, usage={**usage, "output_tokens": 1})
        out: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
        out += [{"type": "ping"}] * reply.pings
        for index, block in enumerate(self._content(reply, n)):
            kind = block["type"]
            first: dict[str, Any]
            deltas: list[dict[str, Any]]
            if kind == "text":
                first, deltas = (
                    {"type": "text", "text": ""},
                    [{"type": "text_delta", "text": p} for p in _pieces(block["text"], reply.chunk)],
                )
            elif kind == "thinking":
                first = {"type": "thinking", "thinking": ""}
                deltas = [{"type": "thinking_delta", "thinking": p} for p in _pieces(block["thinking"], reply.chunk)]
                deltas.append({"type": "signature_delta", "signature": block["signature"]})
            elif kind == "tool_use":
                first = {**block, "input": {}}
                deltas = [
                    {"type": "input_json_delta", "partial_json": p}
                    for p in _pieces(json.dumps(block["input"]), reply.chunk)
                ]
            else:  # redacted_thinking arrives whole
                first, deltas = block, []
            out.append({"type": "content_block_start", "index": index, "content_block": first})
            out += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
            out.append({"type": "content_block_stop", "index": index})
        out.append(
            {
                "type": "message_delta",
                "delta": {"stop_reason": _stop(reply), "stop_sequence": None},
                "usage": {"output_tokens": reply.output_tokens},
            }
        )
        out.append({"type": "message_stop"})
        return out

    def _stream(
        self, handler: BaseHTTPRequestHandler, reply: Reply, body: dict[str, Any], n: int, usage: dict[str, int]
    ) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream; charset=utf-8")
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.send_header("request-id", "req_fake")
        for k, v in reply.headers.items():
            handler.send_header(k, v)
        handler.end_headers()
        events = self._events(reply, body, n, usage)
        if reply.error_after is not None:  # an error event mid-stream, as the API sends one
            overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
            events = [*events[: reply.error_after], overloaded]
        for i, event in enumerate(events):
            if reply.cut_after is not None and i >= reply.cut_after:
                handler.wfile.flush()
                handler.close_connection = True
                handler.connection.shutdown(socket.SHUT_RDWR)
                return
            if reply.delay and i:
                time.sleep(reply.delay)
            line = f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            handler.wfile.flush()
        handler.wfile.write(b"0\r\n\r\n")


def _blocks(body: dict[str, Any]) -> list[tuple[str, bool]]:
    """The prompt as the cache sees it: (the block's JSON without ``cache_control``, whether it
    carries a breakpoint), tools first, then system, then each message's blocks."""
    out: list[tuple[str, bool]] = []

    def add(block: Any, prefix: str = "") -> None:
        if isinstance(block, dict):
            marked = "cache_control" in block
            block = {k: v for k, v in block.items() if k != "cache_control"}
        else:
            marked = False
        out.append((prefix + json.dumps(block, sort_keys=True, separators=(",", ":")), marked))

    for tool_ in body.get("tools") or ():
        add(tool_)
    system = body.get("system")
    if isinstance(system, str):
        add({"type": "text", "text": system})
    for block in system if isinstance(system, list) else ():
        add(block)
    for m in body.get("messages") or ():
        if not isinstance(m, dict):
            continue
        content = m.get("content")
        for block in content if isinstance(content, list) else [{"type": "text", "text": content}]:
            add(block, f"{m.get('role')}:")
    return out


def _stop(reply: Reply) -> str:
    return reply.stop_reason or ("tool_use" if reply.tool_uses else "end_turn")


def _pieces(value: str, size: int) -> list[str]:
    size = max(1, size)
    return [value[i : i + size] for i in range(0, len(value), size)] or [""]


if __name__ == "__main__":  # a long-running server for manual tries: always answers "ok"
    srv = FakeAnthropic()
    srv.default = text("ok")
    srv.start()
    print(srv.base_url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        srv.stop()
