"""MCP tools: call overhead after start through the whole tool path (approval gate with the
hardline check of the arguments, the SDK, the server's echo), over stdio (target median <= 5 ms)
and streamable HTTP on 127.0.0.1 (<= 10 ms); stdio server start to tool list (<= 1 s), for the
Python test server on the mcp SDK and for a minimal sh server (the client's own share).
Main before had no MCP client: there is no "before" figure."""

from __future__ import annotations

import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO, row  # noqa: E402

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


def starts(server: McpServer) -> list[float]:
    out = []
    for _ in range(STARTS):
        started = time.perf_counter()
        session, registry = open_session(server)
        out.append(time.perf_counter() - started)
        assert registry.entries, session.down
        session.close()
    return out


def calls(server: McpServer, tool: str, args: dict[str, object]) -> list[float]:
    session, registry = open_session(server)
    handler, context = registry.entries[tool].handler, ctx()
    try:
        for _ in range(20):
            handler(args, context)
        out = []
        for _ in range(CALLS):
            started = time.perf_counter()
            result = handler(args, context)
            out.append(time.perf_counter() - started)
            assert not result.failed, result.text
        return out
    finally:
        session.close()


def raw_calls(server: McpServer) -> list[float]:
    """The same call straight through the connection (no gate, no truncation): the SDK's share."""
    session, registry = open_session(server)
    connection = session._live["b"].connection
    assert connection is not None
    try:
        out = []
        for _ in range(CALLS):
            started = time.perf_counter()
            connection.call("echo", {"text": "x"}, 10.0)
            out.append(time.perf_counter() - started)
        return out
    finally:
        session.close()


def sdk_import() -> float:
    out = []
    for _ in range(STARTS):
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


def main() -> None:
    py = McpServer(command=sys.executable, args=[str(PY_SERVER)])
    sh = McpServer(command="sh", args=[str(SH_SERVER)])
    args = {"text": "hello from the bench, nothing dangerous here"}
    stdio = calls(py, "mcp__b__echo", args)
    row("stdio call, whole tool path (median)", f"{statistics.median(stdio) * 1000:.2f} ms", "<= 5 ms")
    row("stdio call p99", f"{p99(stdio) * 1000:.2f} ms", "(printed)")
    raw = raw_calls(py)
    row("stdio call, connection only (SDK + server, median)", f"{statistics.median(raw) * 1000:.2f} ms", "(printed)")
    proc, url = http_server()
    try:
        http = calls(McpServer(url=url), "mcp__b__echo", args)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    row("streamable HTTP call, whole tool path (median)", f"{statistics.median(http) * 1000:.2f} ms", "<= 10 ms")
    row("streamable HTTP call p99", f"{p99(http) * 1000:.2f} ms", "(printed)")
    row("stdio start to tool list, Python SDK server (median)", f"{statistics.median(starts(py)):.3f} s", "<= 1 s")
    row("stdio start to tool list, sh server (median)", f"{statistics.median(starts(sh)):.3f} s", "(client share)")
    row("  of which: python -c 'import mcp.server.mcpserver' (median)", f"{sdk_import():.3f} s", "(server's share)")
    row("main before", "no MCP client", "-")


if __name__ == "__main__":
    main()
