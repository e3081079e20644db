"""A real HTTP server speaking the OpenAI chat-completions protocol, scripted per test.

This is the edge of the world for the tests: everything else (CLI, store, loop, tools,
backends) runs for real. A script is a list of replies consumed in order; each reply is a
final answer, one or more tool calls, an HTTP error (with headers), or a hang. The server
logs every request it receives (body, headers, the API key used) for assertions.

A request with ``"stream": true`` gets server-sent events (chunked), as the API sends them:
content, reasoning and tool-call argument deltas in pieces of ``Reply.chunk`` characters,
the finish chunk, the usage chunk when ``stream_options.include_usage`` asks for it, then
``data: [DONE]``. A reply can make the stream slow (``delay`` between events), stall
(``stall`` seconds after ``stall_after`` events) or cut (the connection drops after
``cut_after`` events). ``raw`` serves recorded bytes as they are (tests/agent/wire/).

``FakeOpenAI(prefix_cache=True)`` models a provider's prompt cache (OpenAI's automatic caching):
a request's prompt (its tools, then its messages, as JSON) is compared with the prompts of the
requests before it; the longest common prefix, in tokens estimated as characters / 4, rounded down
to 128-token blocks and only from 1,024 tokens on, is reported as
``usage.prompt_tokens_details.cached_tokens``, and ``prompt_tokens`` is the prompt's estimated size.
Off by default (scripted usage as given).

Standard library only (``http.server``), so it imports without pytest; ``python -m
runner.testing.fakeopenai`` serves "ok" to every request for manual tries.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer: 200 with content and/or tool calls, or an error status, or a hang."""

    status: int = 200
    content: str | None = None
    tool_calls: list[tuple[str, Any]] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None
    hang: float = 0.0
    finish_reason: str | None = None
    usage: tuple[int, int] = (100, 20)
    keys: tuple[str, ...] | None = None  # only answer this way for these keys (else fall through)
    reasoning: str | None = None  # sent as ``reasoning_content``
    refusal: str | None = None
    parts: list[dict[str, Any]] | None = None  # the content as a list of parts (not streamed)
    cached: int = 0  # usage.prompt_tokens_details.cached_tokens
    chunk: int = 16  # characters per streamed delta
    delay: float = 0.0  # seconds between streamed events (a slow generation)
    stall_after: int | None = None  # stream this many events, then sleep ``stall`` seconds
    stall: float = 0.0
    cut_after: int | None = None  # stream this many events, then drop the connection
    raw: bytes | None = None  # the body, byte for byte (a recorded response); headers as given
    events: list[bytes] | None = None  # a recorded stream: each piece sent as it is, ``delay`` apart
    when: str | None = None  # only answer this way when a user message contains this text (a subagent's goal)

    def fits(self, key: str | None, messages: Any) -> bool:
        """Whether this reply may answer a request with API key ``key`` and these messages."""
        if self.keys is not None and key not in self.keys:
            return False
        return self.when is None or self.when in _user_text(messages)


def _user_text(messages: Any) -> str:
    if not isinstance(messages, list):
        return ""
    parts = [m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    return "\n".join(p for p in parts if isinstance(p, str))


def final(text: str, usage: tuple[int, int] = (100, 20)) -> Reply:
    """A final answer (no tool calls): the run ends with ``text`` as its output."""
    return Reply(content=text, usage=usage)


def call(name: str, args: Any = None, *more: tuple[str, Any]) -> Reply:
    """A turn that calls tool ``name`` with ``args`` (a dict, or raw JSON text), then ``more``."""
    return Reply(tool_calls=[(name, args if args is not None else {}), *more])


def calls(*pairs: tuple[str, Any]) -> Reply:
    """A turn with several tool calls: ``calls(("read_file", {...}), ("terminal", {...}))``."""
    return Reply(tool_calls=list(pairs))


def when(text: str, reply: Reply) -> Reply:
    """``reply`` given only to a request whose user messages contain ``text`` (route the answers
    of subagents running at the same time by their goals)."""
    from dataclasses import replace

    return replace(reply, when=text)


def error(status: int, message: str = "error", headers: dict[str, str] | None = None, **kw: Any) -> Reply:
    """An HTTP error with an OpenAI-style error body (and e.g. ``retry-after`` headers)."""
    return Reply(status=status, body={"error": {"message": message, "type": "test"}}, headers=headers or {}, **kw)


def hang(seconds: float) -> Reply:
    """Answer only after ``seconds`` (to hit request, idle and run timeouts)."""
    return Reply(hang=seconds, content="too late")


def cut(text: str, after: int = 3, **kw: Any) -> Reply:
    """A streamed answer whose connection drops after ``after`` events (``text`` never ends)."""
    return Reply(content=text, cut_after=after, **kw)


def stall(text: str, seconds: float, after: int = 3, **kw: Any) -> Reply:
    """A streamed answer that stops sending for ``seconds`` after ``after`` events."""
    return Reply(content=text, stall_after=after, stall=seconds, **kw)


class FakeOpenAI:
    """The server: ``start()`` it, point ``OPENAI_BASE_URL`` at ``base_url``, ``add()`` replies.

    A request takes the first scripted reply whose ``keys`` admit its API key (and whose ``when``
    text is in its user messages); with none left it gets ``default`` if set, else HTTP 500
    "script exhausted". ``requests`` logs each request.
    """

    def __init__(self, *, prefix_cache: bool = False) -> None:
        self.prefix_cache = prefix_cache
        self.prompts: deque[str] = deque(maxlen=CACHED_PROMPTS)  # what the prefix cache holds
        self.script: list[Reply] = []
        self.default: Reply | None = None
        self.requests: list[dict[str, Any]] = []
        self.models = ["gpt-4.1-mini"]  # what GET /models lists (runner doctor reads it)
        self.gets: list[str] = []  # paths of GET requests (kept apart from the chat requests)
        self.lock = threading.Lock()
        self._counter = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                # answers (and each streamed event) leave at once, as from a real server: without
                # this, Nagle's algorithm and the client's delayed ACK add ~40 ms to each reply
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def handle(self) -> None:
                try:
                    super().handle()
                except (ConnectionResetError, BrokenPipeError):
                    return  # the client went away (a timeout, a cut test, its exit): nothing to answer

            def log_message(self, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                server._list_models(self)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                server._handle(self, raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def start(self) -> FakeOpenAI:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def add(self, *replies: Reply) -> FakeOpenAI:
        with self.lock:
            self.script.extend(replies)
        return self

    def keys_used(self) -> list[str]:
        return [r["key"] for r in self.requests]

    def _next(self, key: str | None, body: dict[str, Any]) -> Reply:
        with self.lock:
            for i, reply in enumerate(self.script):
                if reply.fits(key, body.get("messages")):
                    return self.script.pop(i)
            if self.default is not None:
                return self.default
        return error(500, "fake server: script exhausted")

    def _handle(self, handler: BaseHTTPRequestHandler, raw: bytes) -> None:
        auth = handler.headers.get("Authorization") or ""
        key = auth[7:] if auth.startswith("Bearer ") else None
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"_raw": raw.decode("utf-8", "replace")}
        reply = self._next(key, body if isinstance(body, dict) else {})
        if self.prefix_cache and reply.status == 200 and reply.raw is None and reply.events is None:
            reply = self._cache(reply, body if isinstance(body, dict) else {})
        with self.lock:
            self.requests.append(
                {
                    "body": body,
                    "bytes": len(raw),
                    "key": key,
                    "time": time.time(),
                    "path": handler.path,
                    "status": reply.status,
                    "stream": body.get("stream") is True,
                    "headers": dict(handler.headers.items()),
                }
            )
            self._counter += 1
            n = self._counter
        if reply.hang:
            time.sleep(reply.hang)
        try:
            if reply.events is not None:
                self._send_events(handler, reply)
                return
            if reply.status == 200 and reply.raw is None and body.get("stream") is True:
                self._stream(handler, reply, body, n)
                return
            if reply.raw is not None:
                payload = reply.raw
            elif reply.status != 200:
                payload = json.dumps(reply.body or {"error": {"message": "error"}}).encode()
            else:
                payload = json.dumps(self._completion(reply, body, n)).encode()
            handler.send_response(reply.status)
            if not any(k.lower() == "content-type" for k in reply.headers):
                handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(payload)))
            for k, v in reply.headers.items():
                handler.send_header(k, v)
            handler.end_headers()
            handler.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            return

    def _cache(self, reply: Reply, body: dict[str, Any]) -> Reply:
        """``reply`` with the usage a prefix-caching provider reports for ``body``'s prompt."""
        prompt = json.dumps(body.get("tools"), sort_keys=True) + json.dumps(body.get("messages"), sort_keys=True)
        with self.lock:
            hit = max((common_prefix(prompt, p) for p in self.prompts), default=0)
            self.prompts.append(prompt)
        cached = hit // CHARS_PER_TOKEN // CACHE_BLOCK * CACHE_BLOCK
        cached = cached if cached >= CACHE_MIN else 0
        return replace(reply, usage=(len(prompt) // CHARS_PER_TOKEN, reply.usage[1]), cached=reply.cached or cached)

    def _stream(self, handler: BaseHTTPRequestHandler, reply: Reply, body: dict[str, Any], n: int) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Transfer-Encoding", "chunked")
        for k, v in reply.headers.items():
            handler.send_header(k, v)
        handler.end_headers()
        options = body.get("stream_options") or {}
        events = self._chunks(reply, body, n, usage=bool(options.get("include_usage")))
        lines = [f"data: {json.dumps(e)}\n\n".encode() for e in events] + [b"data: [DONE]\n\n"]
        for i, line in enumerate(lines):
            if reply.cut_after is not None and i >= reply.cut_after:
                handler.wfile.flush()
                handler.close_connection = True
                handler.connection.shutdown(socket.SHUT_RDWR)
                return
            if reply.stall_after is not None and i == reply.stall_after:
                time.sleep(reply.stall)
            elif reply.delay and i:
                time.sleep(reply.delay)
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            handler.wfile.flush()
        handler.wfile.write(b"0\r\n\r\n")

    @staticmethod
    def _send_events(handler: BaseHTTPRequestHandler, reply: Reply) -> None:
        """A recorded stream, piece by piece (chunked), ``delay`` seconds apart."""
        handler.send_response(reply.status)
        if not any(k.lower() == "content-type" for k in reply.headers):
            handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Transfer-Encoding", "chunked")
        for k, v in reply.headers.items():
            handler.send_header(k, v)
        handler.end_headers()
        for i, piece in enumerate(reply.events or ()):
            if reply.delay and i:
                time.sleep(reply.delay)
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            handler.wfile.flush()
        handler.wfile.write(b"0\r\n\r\n")

    def _list_models(self, handler: BaseHTTPRequestHandler) -> None:
        found = handler.path.rstrip("/").endswith("/models")
        payload = json.dumps({"object": "list", "data": [{"id": m, "object": "model"} for m in self.models]})
        raw = payload.encode() if found else b'{"error": {"message": "not found"}}'
        with self.lock:
            self.gets.append(handler.path)
        handler.send_response(200 if found else 404)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(raw)))
        handler.end_headers()
        handler.wfile.write(raw)

    @staticmethod
    def _completion(reply: Reply, body: dict[str, Any], n: int) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.parts or reply.content}
        if reply.reasoning is not None:
            message["reasoning_content"] = reply.reasoning
        if reply.refusal is not None:
            message["refusal"] = reply.refusal
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": f"call_{n}_{i}", "type": "function", "function": {"name": name, "arguments": _args(args)}}
                for i, (name, args) in enumerate(reply.tool_calls)
            ]
        return {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
            "choices": [{"index": 0, "message": message, "finish_reason": _finish(reply)}],
            "usage": _usage(reply),
        }

    @staticmethod
    def _chunks(reply: Reply, body: dict[str, Any], n: int, *, usage: bool) -> list[dict[str, Any]]:
        """The chat.completion.chunk events of a streamed reply, in order."""
        head = {"id": f"chatcmpl-{n}", "object": "chat.completion.chunk", "created": int(time.time())}
        head["model"] = body.get("model", "fake")

        def event(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        out = [event({"role": "assistant", "content": ""})]
        out += [event({"reasoning_content": p}) for p in _pieces(reply.reasoning, reply.chunk)]
        out += [event({"content": p}) for p in _pieces(reply.content, reply.chunk)]
        if reply.refusal is not None:
            out.append(event({"refusal": reply.refusal}))
        for i, (name, args) in enumerate(reply.tool_calls):
            first = {"index": i, "id": f"call_{n}_{i}", "type": "function"}
            out.append(event({"tool_calls": [{**first, "function": {"name": name, "arguments": ""}}]}))
            out += [
                event({"tool_calls": [{"index": i, "function": {"arguments": p}}]})
                for p in _pieces(_args(args), reply.chunk)
            ]
        out.append(event({}, _finish(reply)))
        if usage:
            out.append({**head, "choices": [], "usage": _usage(reply)})
        return out


CHARS_PER_TOKEN = 4
CACHE_BLOCK = 128  # tokens: a cache hit counts in whole blocks (OpenAI: 128-token increments)
CACHE_MIN = 1024  # tokens: shorter prefixes are never cached (OpenAI: prompts of 1,024 tokens and more)
CACHED_PROMPTS = 32  # earlier prompts the cache remembers


def common_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix of ``a`` and ``b`` (binary search on C-speed slices)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _args(args: Any) -> str:
    return args if isinstance(args, str) else json.dumps(args)


def _finish(reply: Reply) -> str:
    return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")


def _usage(reply: Reply) -> dict[str, Any]:
    out: dict[str, Any] = {
        "prompt_tokens": reply.usage[0],
        "completion_tokens": reply.usage[1],
        "total_tokens": sum(reply.usage),
    }
    if reply.cached:
        out["prompt_tokens_details"] = {"cached_tokens": reply.cached}
    return out


def _pieces(text: str | None, size: int) -> list[str]:
    if not text:
        return []
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)]


if __name__ == "__main__":  # a long-running server for manual tries: always answers "ok"
    srv = FakeOpenAI()
    srv.default = final("ok")
    srv.start()
    print(srv.base_url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        srv.stop()
