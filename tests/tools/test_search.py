"""web_search against real local HTTP servers speaking SearXNG's, Brave's and Tavily's JSON; the
approval gate, the key from env, the operator's private endpoint, a whole run through run-job."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from runner.backends.base import BackendContext
from runner.backends.local import LocalBackend
from runner.errors import ConfigError
from runner.safety.result import ApprovalResult
from runner.settings import Settings
from runner.testing import call, final
from runner.tools import ToolError, discover
from runner.tools.context import ToolContext
from runner.tools.search import web_search

SEARX = {
    "query": "q",
    "results": [
        {"title": f"Result {i}", "url": f"https://example.org/{i}", "content": f"snippet  number {i}", "engine": "x"}
        for i in range(1, 9)
    ],
}


class SearchServer:
    """A real HTTP server on 127.0.0.1 answering GET and POST with ``answer`` (JSON)."""

    def __init__(self, answer: Any, status: int = 200):
        self.answer, self.status = answer, status
        self.requests: list[dict[str, Any]] = []
        state = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def _reply(self, body: bytes) -> None:
                parts = urlsplit(self.path)
                state.requests.append(
                    {
                        "method": self.command,
                        "path": parts.path,
                        "query": parse_qs(parts.query),
                        "headers": dict(self.headers),
                        "body": json.loads(body) if body else None,
                    }
                )
                raw = json.dumps(state.answer).encode()
                self.send_response(state.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:
                self._reply(b"")

            def do_POST(self) -> None:
                self._reply(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def searx() -> Iterator[SearchServer]:
    server = SearchServer(SEARX)
    yield server
    server.stop()


def context(tmp_path: Path, search: str, approve: Any = None) -> ToolContext:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "config.yaml").write_text(search)
    settings = Settings(home=home, jobs_path=tmp_path / "jobs.yaml", config_path=home / "config.yaml")
    backend = LocalBackend(BackendContext(workdir=str(tmp_path), home=home))
    allow = approve or (lambda command: ApprovalResult(True, ""))
    return ToolContext(backend=backend, settings=settings, approve=allow)


def test_searxng_results_are_titles_urls_and_snippets(tmp_path, searx):
    ctx = context(tmp_path, f"search: {{provider: searxng, url: '{searx.url}/'}}\n")
    answer = web_search({"query": "rust async", "limit": 3}, ctx)
    assert not answer.failed
    [req] = searx.requests
    assert req["method"] == "GET" and req["path"] == "/search"
    assert req["query"] == {"q": ["rust async"], "format": ["json"]}
    text = answer.text
    assert text.startswith("3 results for 'rust async'")
    assert "1. Result 1\n   https://example.org/1\n   snippet number 1" in text and "Result 4" not in text


def test_the_gate_sees_the_query_and_can_refuse(tmp_path, searx):
    seen: list[str] = []

    def deny(command: str) -> ApprovalResult:
        seen.append(command)
        return ApprovalResult(False, "blocked: not today")

    ctx = context(tmp_path, f"search: {{url: '{searx.url}'}}\n", approve=deny)
    answer = web_search({"query": "secret plans"}, ctx)
    assert answer.failed and answer.text == "blocked: not today"
    assert seen == ["web_search 'secret plans'"] and searx.requests == []


def test_brave_key_from_env_in_its_header_and_never_in_the_result(tmp_path, monkeypatch):
    server = SearchServer(
        {"web": {"results": [{"title": "B", "url": "https://b.example/", "description": "brave hit"}]}}
    )
    try:
        monkeypatch.setenv("BRAVE_KEY", "brv-0123456789")
        ctx = context(tmp_path, f"search: {{provider: brave, url: '{server.url}/res', api_key: env:BRAVE_KEY}}\n")
        answer = web_search({"query": "q", "limit": 2}, ctx)
        [req] = server.requests
        assert req["headers"]["X-Subscription-Token"] == "brv-0123456789"
        assert req["query"] == {"q": ["q"], "count": ["2"]}
        assert "brave hit" in answer.text and "brv-" not in answer.text
        server.status = 401
        server.answer = {"error": "bad key brv-0123456789"}
        with pytest.raises(ToolError, match="HTTP 401") as info:
            web_search({"query": "q"}, ctx)
        assert "brv-0123456789" not in str(info.value)
    finally:
        server.stop()


def test_tavily_posts_the_query_with_a_bearer_key(tmp_path, monkeypatch):
    server = SearchServer({"results": [{"title": "T", "url": "https://t.example/", "content": "tavily hit"}]})
    try:
        monkeypatch.setenv("TAVILY_KEY", "tvly-abc")
        ctx = context(tmp_path, f"search: {{provider: tavily, url: '{server.url}/search', api_key: env:TAVILY_KEY}}\n")
        answer = web_search({"query": "q", "limit": 4}, ctx)
        [req] = server.requests
        assert req["method"] == "POST" and req["body"] == {"query": "q", "max_results": 4}
        assert req["headers"]["Authorization"] == "Bearer tvly-abc"
        assert "tavily hit" in answer.text
        monkeypatch.delenv("TAVILY_KEY")
        with pytest.raises(ToolError, match="TAVILY_KEY"):
            web_search({"query": "q"}, ctx)
    finally:
        server.stop()


def test_not_offered_without_a_search_config(tmp_path):
    ctx = context(tmp_path, "timezone: UTC\n")
    entry = discover().entries["web_search"]
    assert entry.read_only
    assert "config.yaml search:" in (entry.unavailable_reason(ctx) or "")


@pytest.mark.parametrize(
    "text, field",
    [
        ("search: {provider: searxng}\n", "needs url"),
        ("search: {provider: brave}\n", "needs api_key"),
        ("search: {provider: bing, url: 'http://x'}\n", "search.provider"),
        ("search: {url: 'ftp://x'}\n", "must start with http"),
    ],
)
def test_bad_search_config_names_the_field(tmp_path, text, field):
    from runner.config.machine import load_config

    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=field):
        load_config(path, environ={})


def test_a_run_searches_through_the_tool(project, fake, searx):
    project.home.mkdir(parents=True, exist_ok=True)
    (project.home / "config.yaml").write_text(f"search: {{provider: searxng, url: '{searx.url}'}}\n")
    project.write_jobs("jobs:\n  find:\n    prompt: Look it up\n    toolsets: [web]\n    deliver: [stdout]\n")
    fake.add(call("web_search", {"query": "runner docs", "limit": 2}), final("found it"))
    res = project.run("run-job", "find")
    assert res.returncode == 0, res.stderr
    tools = {t["function"]["name"] for t in fake.requests[0]["body"]["tools"]}
    assert tools == {"web_fetch", "web_search"}
    result = next(m["content"] for m in fake.requests[1]["body"]["messages"] if m["role"] == "tool")
    assert result.startswith("2 results for 'runner docs'") and "https://example.org/2" in result
    assert searx.requests[0]["query"]["q"] == ["runner docs"]
