"""Parallel read-only calls: one model turn's read-only calls run at the same time (a barrier in
a real HTTP server only opens when they all arrive), results and events keep the model's order,
and a turn with any other tool stays one call at a time."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from runner.agent.loop import MAX_PARALLEL, Limits, run_loop
from runner.backends.base import BackendContext
from runner.backends.local import LocalBackend
from runner.events import encode
from runner.safety.result import ApprovalResult
from runner.safety.ssrf import WebPolicy
from runner.testing import ScriptedLLM, calls, final
from runner.tools import discover
from runner.tools.context import ToolContext


class Rendezvous:
    """A real HTTP server: each GET waits at a barrier of ``parties`` (so it answers only when
    that many requests are in flight at once), or answers ``alone`` when the barrier breaks."""

    def __init__(self, parties: int, wait: float = 10.0):
        self.barrier = threading.Barrier(parties, timeout=wait)
        self.inflight = 0
        self.most = 0
        self.lock = threading.Lock()
        state = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                with state.lock:
                    state.inflight += 1
                    state.most = max(state.most, state.inflight)
                try:
                    state.barrier.wait()
                    body = f"page {self.path} met the others".encode()
                except threading.BrokenBarrierError:
                    body = f"page {self.path} alone".encode()
                with state.lock:
                    state.inflight -= 1
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    work = tmp_path / "work"
    work.mkdir()
    b = LocalBackend(BackendContext(workdir=work, home=tmp_path))
    yield b
    b.close()


def run(backend: LocalBackend, llm: ScriptedLLM) -> tuple[list[dict[str, Any]], list[tuple[str, dict[str, Any]]]]:
    events: list[tuple[str, dict[str, Any]]] = []
    asked: list[str] = []

    def approve(command: str) -> ApprovalResult:
        asked.append(command)
        return ApprovalResult(True, "")

    ctx = ToolContext(
        backend=backend,
        approve=approve,
        web=WebPolicy(allow_private=True),
        emit=lambda kind, data: events.append((kind, encode(data))),
    )
    registry = discover()
    tools = [registry.entries[n] for n in ("web_fetch", "read_file", "list_dir", "write_file", "terminal")]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    result = run_loop(
        messages, tools, ctx, llm, Limits(max_iterations=5), emit=lambda k, d: events.append((k, encode(d)))
    )
    assert result.output == "done"
    return messages, events


def test_read_only_calls_overlap_and_return_in_the_models_order(backend):
    n = MAX_PARALLEL
    server = Rendezvous(n)
    try:
        llm = ScriptedLLM(calls(*[("web_fetch", {"url": server.url(f"/p{i}")}) for i in range(n)]), final("done"))
        messages, events = run(backend, llm)
    finally:
        server.stop()
    results = [m["content"] for m in messages if m["role"] == "tool"]
    assert [r.splitlines()[-1] for r in results] == [f"page /p{i} met the others" for i in range(n)]
    assert server.most == n
    ids = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert ids == [c["id"] for c in messages[1]["tool_calls"]]
    kinds = [(k, d.get("id")) for k, d in events if k in ("tool_call", "tool_result")]
    assert kinds == [("tool_call", i) for i in ids] + [("tool_result", i) for i in ids]


def test_more_than_the_cap_still_all_run_in_order(backend, tmp_path):
    work = Path(backend.workdir)
    for i in range(MAX_PARALLEL + 3):
        (work / f"f{i}.txt").write_text(f"content {i}\n")
    llm = ScriptedLLM(
        calls(*[("read_file", {"path": f"f{i}.txt"}) for i in range(MAX_PARALLEL + 3)], ("list_dir", {})),
        final("done"),
    )
    messages, _ = run(backend, llm)
    results = [m["content"] for m in messages if m["role"] == "tool"]
    assert [f"content {i}" in r for i, r in enumerate(results[:-1])] == [True] * (MAX_PARALLEL + 3)
    assert "f10.txt" in results[-1]


def test_a_turn_with_a_write_runs_one_call_at_a_time(backend):
    server = Rendezvous(2, wait=0.5)
    try:
        llm = ScriptedLLM(
            calls(
                ("web_fetch", {"url": server.url("/a")}),
                ("write_file", {"path": "out.txt", "content": "x"}),
                ("web_fetch", {"url": server.url("/b")}),
            ),
            final("done"),
        )
        messages, events = run(backend, llm)
    finally:
        server.stop()
    results = [m["content"] for m in messages if m["role"] == "tool"]
    assert results[0].endswith("page /a alone") and results[2].endswith("page /b alone")
    assert server.most == 1
    kinds = [k for k, _ in events if k in ("tool_call", "tool_result")]
    assert kinds == ["tool_call", "tool_result"] * 3


def test_a_failing_call_among_parallel_ones_keeps_its_place(backend):
    (Path(backend.workdir) / "ok.txt").write_text("fine\n")
    llm = ScriptedLLM(
        calls(("read_file", {"path": "missing.txt"}), ("read_file", {"path": "ok.txt"}), ("list_dir", {"path": "."})),
        final("done"),
    )
    messages, events = run(backend, llm)
    results = [m["content"] for m in messages if m["role"] == "tool"]
    assert results[0].startswith("error:") and "fine" in results[1] and "ok.txt" in results[2]
    failed = [d["failed"] for k, d in events if k == "tool_result"]
    assert failed == [True, False, False]
    assert json.loads(messages[1]["tool_calls"][0]["function"]["arguments"]) == {"path": "missing.txt"}
