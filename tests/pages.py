"""A real HTTP server on 127.0.0.1 that serves pages by path and records what it was asked:
``web_fetch`` tests (tests/tools/test_web.py, tests/safety/test_ssrf_metadata.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PAGE = b"<html><head><title>T</title></head><body><p>hello from the server</p></body></html>"


@dataclass
class Server:
    """``routes`` maps a path to (status, headers, body); any other path gets the test page."""

    routes: dict[str, tuple[int, dict[str, str], bytes]] = field(default_factory=dict)
    requests: list[dict[str, str]] = field(default_factory=list)
    port: int = 0

    def url(self, path: str = "/", host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    @property
    def paths(self) -> list[str]:
        """What it was asked for, in order."""
        return [r["path"] for r in self.requests]


@contextmanager
def pages() -> Iterator[Server]:
    """A page server for the length of the block."""
    state = Server()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.requests.append({"path": self.path, "host": self.headers.get("Host", ""), "version": self.request_version})
            status, headers, body = state.routes.get(self.path, (200, {"Content-Type": "text/html"}, PAGE))
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = srv.server_address[1]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield state
    finally:
        srv.shutdown()
        srv.server_close()
