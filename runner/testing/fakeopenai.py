"""A real HTTP server speaking the OpenAI chat-completions protocol, scripted per test.

This is the edge of the world for the tests: everything else (CLI, store, loop, tools,
backends) runs for real. A script is a list of replies consumed in order; each reply is a
final answer, one or more tool calls, an HTTP error (with headers), or a hang. The server
logs every request it receives (body, headers, the API key used) for assertions.

Standard library only (``http.server``), so it imports without pytest; ``python -m
runner.testing.fakeopenai`` serves "ok" to every request for manual tries.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
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


class FakeOpenAI:
    """The server: ``start()`` it, point ``OPENAI_BASE_URL`` at ``base_url``, ``add()`` replies.

    A request takes the first scripted reply whose ``keys`` admit its API key (and whose ``when``
    text is in its user messages); with none left it gets ``default`` if set, else HTTP 500
    "script exhausted". ``requests`` logs each request.
    """

    def __init__(self) -> None:
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
        with self.lock:
            self.requests.append(
                {
                    "body": body,
                    "bytes": len(raw),
                    "key": key,
                    "time": time.time(),
                    "path": handler.path,
                    "status": reply.status,
                }
            )
            self._counter += 1
            n = self._counter
        if reply.hang:
            time.sleep(reply.hang)
        if reply.status != 200:
            payload = json.dumps(reply.body or {"error": {"message": "error"}}).encode()
        else:
            payload = json.dumps(self._completion(reply, body, n)).encode()
        try:
            handler.send_response(reply.status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(payload)))
            for k, v in reply.headers.items():
                handler.send_header(k, v)
            handler.end_headers()
            handler.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            return

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
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": f"call_{n}_{i}",
                    "type": "function",
                    "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)},
                }
                for i, (name, args) in enumerate(reply.tool_calls)
            ]
        finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
        return {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "model": body.get("model", "fake"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": reply.usage[0],
                "completion_tokens": reply.usage[1],
                "total_tokens": sum(reply.usage),
            },
        }


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
