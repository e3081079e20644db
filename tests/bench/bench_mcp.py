"""MCP tools: call overhead after start through the whole tool path (approval gate with the
hardline check of the arguments, the SDK, the server's echo), over stdio (target median <= 5 ms)
and streamable HTTP on 127.0.0.1 (<= 10 ms); stdio server start to tool list (<= 1 s), for the
Python test server on the mcp SDK and for a minimal sh server (the client's own share).

Main before: the same figures from main before's tree (``_before.each_tree``). Floors: the same
``echo`` call as a bare JSON-RPC line over the test server's pipes (stdio) or a bare httpx POST
to it (streamable HTTP), after a bare ``initialize``; for the start, the server's own
``import mcp.server.mcpserver``.

    python tests/bench/bench_mcp.py [--calls N] [--starts N]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _before import each_tree  # noqa: E402
from _common import REPO, beside, row  # noqa: E402

from runner.config.mcp import McpServer  # noqa: E402
from runner.mcp.session import McpSession  # noqa: E402
from runner.safety.approval import AutoDeny, Gate  # noqa: E402
from runner.tools import Registry  # noqa: E402
from runner.tools.context import ToolContext  # noqa: E402

PY_SERVER = REPO / "tests" / "mcp" / "server.py"
SH_SERVER = REPO / "tests" / "backends" / "mcp_sh_server.sh"
CALLS = 300
STARTS = 5


class Host:
    workdir = tempfile.gettempdir()


def ctx() -> ToolContext:
    gate = Gate("deny", (), AutoDeny(), lambda c, d: None)
    return ToolContext(backend=Host(), approve=gate, approve_tool=gate.tool)  # type: ignore[arg-type]


def open_session(server: McpServer) -> tuple[McpSession, Registry]:
    session = McpSession({"b": server}, Host(), lambda k, p: None, lambda n: None)
    registry = Registry()
    session.add_to(registry, ["mcp:b"])
    return session, registry


def starts(server: McpServer, n: int = STARTS) -> list[float]:
    out = []
    for _ in range(n):
        started = time.perf_counter()
        session, registry = open_session(server)
        out.append(time.perf_counter() - started)
        assert registry.entries, session.down
        session.close()
    return out


def calls(server: McpServer, tool: str, args: dict[str, object], n: int = CALLS) -> list[float]:
    session, registry = open_session(server)
    handler, context = registry.entries[tool].handler, ctx()
    try:
        for _ in range(20):
            handler(args, context)
        out = []
        for _ in range(n):
            started = time.perf_counter()
            result = handler(args, context)
            out.append(time.perf_counter() - started)
            assert not result.failed, result.text
        return out
    finally:
        session.close()


def raw_calls(server: McpServer, n: int = CALLS) -> list[float]:
    """The same call straight through the connection (no gate, no truncation): the SDK's share."""
    session, registry = open_session(server)
    connection = session._live["b"].connection
    assert connection is not None
    try:
        out = []
        for _ in range(n):
            started = time.perf_counter()
            connection.call("echo", {"text": "x"}, 10.0)
            out.append(time.perf_counter() - started)
        return out
    finally:
        session.close()


INIT = {
    "jsonrpc": "2.0", "id": 0, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "floor", "version": "0"}},
}  # fmt: skip


def echo_request(i: int, args: dict[str, object]) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "echo", "arguments": args}}


def stdio_floor(args: dict[str, object], n: int) -> list[float]:
    """The echo call as bare JSON-RPC lines over the Python test server's pipes."""
    proc = subprocess.Popen(
        [sys.executable, str(PY_SERVER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    assert proc.stdin and proc.stdout

    def send(message: dict[str, object]) -> None:
        proc.stdin.write(json.dumps(message) + "\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]

    try:
        send(INIT)
        proc.stdout.readline()
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        out = []
        for i in range(1, n + 1):
            started = time.perf_counter()
            send(echo_request(i, args))
            assert '"isError":false' in proc.stdout.readline().replace(" ", "")
            out.append(time.perf_counter() - started)
        return out
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)


def http_floor(url: str, args: dict[str, object], n: int) -> list[float]:
    """The echo call as a bare httpx POST to the streamable HTTP test server."""
    import httpx

    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    with httpx.Client(timeout=10) as client:
        session = client.post(url, json=INIT, headers=headers).headers.get("mcp-session-id")
        headers |= {"mcp-protocol-version": "2025-06-18"} | ({"mcp-session-id": session} if session else {})
        client.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
        out = []
        for i in range(1, n + 1):
            started = time.perf_counter()
            answer = client.post(url, json=echo_request(i, args), headers=headers)
            assert answer.status_code == 200, answer.text
            out.append(time.perf_counter() - started)
        return out


def sdk_import(n: int = STARTS) -> float:
    out = []
    for _ in range(n):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import mcp.server.mcpserver"], check=True)
        out.append(time.perf_counter() - started)
    return statistics.median(out)


def p99(values: list[float]) -> float:
    return sorted(values)[int(len(values) * 0.99) - 1]


def http_server() -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, str(PY_SERVER), "http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.1)
    return proc, f"http://127.0.0.1:{port}/mcp"


ARGS = {"text": "hello from the bench, nothing dangerous here"}


def measure(n_calls: int, n_starts: int) -> dict[str, list[float]]:
    """Seconds: stdio and HTTP calls through the tool path, stdio connection-only calls, starts."""
    py = McpServer(command=sys.executable, args=[str(PY_SERVER)])
    sh = McpServer(command="sh", args=[str(SH_SERVER)])
    found = {"stdio": calls(py, "mcp__b__echo", ARGS, n_calls), "raw": raw_calls(py, n_calls)}
    proc, url = http_server()
    try:
        found["http"] = calls(McpServer(url=url), "mcp__b__echo", ARGS, n_calls)
        found["http_floor"] = http_floor(url, ARGS, n_calls)  # the floor, on the same server
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    found["start_py"], found["start_sh"] = starts(py, n_starts), starts(sh, n_starts)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=CALLS)
    parser.add_argument("--starts", type=int, default=STARTS)
    options = parser.parse_args()
    measured = each_tree("bench_mcp", "measure", options.calls, options.starts)
    here, before = measured["this tree"], measured.get("main before")
    stdio, raw, http = here["stdio"], here["raw"], here["http"]
    row("stdio call, whole tool path (median)", f"{statistics.median(stdio) * 1000:.2f} ms", "<= 5 ms")
    row("stdio call p99", f"{p99(stdio) * 1000:.2f} ms", "(printed)")
    row("stdio call, connection only (SDK + server, median)", f"{statistics.median(raw) * 1000:.2f} ms", "(printed)")
    row("streamable HTTP call, whole tool path (median)", f"{statistics.median(http) * 1000:.2f} ms", "<= 10 ms")
    row("streamable HTTP call p99", f"{p99(http) * 1000:.2f} ms", "(printed)")
    row("stdio start to tool list, Python SDK server (median)", f"{statistics.median(here['start_py']):.3f} s", "<= 1 s")
    row("stdio start to tool list, sh server (median)", f"{statistics.median(here['start_sh']):.3f} s", "(client share)")
    imported = sdk_import(options.starts)
    row("  of which: python -c 'import mcp.server.mcpserver' (median)", f"{imported:.3f} s", "(server's share)")

    def med(found: dict[str, list[float]] | None, key: str, scale: float = 1000) -> float | None:
        return found and statistics.median(found[key]) * scale

    beside("stdio call, whole tool path", med(here, "stdio"), med(before, "stdio"),
           statistics.median(stdio_floor(ARGS, options.calls)) * 1000, "a bare JSON-RPC line over the server's pipes", "<= 5 ms")
    beside("streamable HTTP call, whole tool path", med(here, "http"), med(before, "http"),
           med(here, "http_floor"), "a bare httpx POST to the same server", "<= 10 ms")
    beside("stdio start to tool list", med(here, "start_py", 1), med(before, "start_py", 1), imported,
           "python -c 'import mcp.server.mcpserver'", "<= 1 s", "s")


if __name__ == "__main__":
    main()
