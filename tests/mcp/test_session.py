"""MCP servers in one run (runner.mcp.session), against the real test server over stdio and
HTTP: tool names, approval levels, hardline arguments, truncation, crash and restart once,
servers that do not start."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.config.mcp import McpServer
from runner.errors import ConfigError
from runner.events import Event, Payload, encode
from runner.mcp.session import McpSession
from runner.safety.approval import AutoApprove, AutoDeny, Gate
from runner.tools import Registry, ToolResult
from runner.tools.context import ToolContext
from tests.mcp.conftest import SERVER


class Host:
    def __init__(self, workdir: Path):
        self.workdir = str(workdir)


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.audit: list[tuple[str, str]] = []

    def emit(self, kind: Event, payload: Payload) -> None:
        self.events.append((kind, encode(payload)))

    def record(self, command: str, decision: Any) -> None:
        self.audit.append((command, decision.decided_by))


def stdio(**extra: Any) -> McpServer:
    return McpServer(command=sys.executable, args=[str(SERVER)], **extra)


@pytest.fixture
def rec() -> Recorder:
    return Recorder()


def open_session(
    tmp_path: Path, rec: Recorder, servers: dict[str, McpServer], refs: list[str], env: dict[str, str] | None = None
) -> tuple[McpSession, Registry]:
    session = McpSession(servers, Host(tmp_path), rec.emit, (env or {}).get)
    registry = Registry()
    session.add_to(registry, refs)
    return session, registry


def context(tmp_path: Path, rec: Recorder, *, approve: bool = False, output_chars: int = 16_000) -> ToolContext:
    gate = Gate("approve" if approve else "deny", (), AutoApprove() if approve else AutoDeny(), rec.record)
    return ToolContext(backend=Host(tmp_path), approve=gate, approve_tool=gate.tool, output_chars=output_chars)  # type: ignore[arg-type]


@pytest.fixture
def session(tmp_path: Path, rec: Recorder) -> Iterator[tuple[McpSession, Registry]]:
    s, r = open_session(tmp_path, rec, {"test": stdio(env=["TEST_SECRET"])}, ["mcp:test"], {"TEST_SECRET": "s3cr3t"})
    yield s, r
    s.close()


def call(registry: Registry, name: str, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    return registry.entries[name].handler(args, ctx)


def test_tools_are_prefixed_and_read_only_ones_are_safe(session, tmp_path, rec):
    _, registry = session
    assert sorted(registry.entries) == [
        "mcp__test__crash", "mcp__test__echo", "mcp__test__hang", "mcp__test__shout", "mcp__test__whoami",
        "mcp__test__write_note",
    ]  # fmt: skip
    entry = registry.entries["mcp__test__echo"]
    assert entry.toolset == "mcp:test" and entry.source == "mcp:test" and entry.alias == "mcp:test/echo"
    assert entry.parameters["required"] == ["text"]
    ctx = context(tmp_path, rec)  # unattended: auto-deny
    assert call(registry, "mcp__test__echo", {"text": "hi"}, ctx) == ToolResult("hi")
    denied = call(registry, "mcp__test__write_note", {"text": "x"}, ctx)
    assert denied.failed and "not allowed" in denied.text and "not marked read-only" in denied.text
    assert not (tmp_path / "notes.txt").exists()
    assert rec.audit == [('mcp__test__write_note {"text":"x"}', "policy")]
    assert "cwd=" + str(tmp_path) in call(registry, "mcp__test__whoami", {}, ctx).text
    assert "secret=set" in call(registry, "mcp__test__whoami", {}, ctx).text


def test_approved_dangerous_tool_runs(session, tmp_path, rec):
    _, registry = session
    result = call(registry, "mcp__test__write_note", {"text": "hello"}, context(tmp_path, rec, approve=True))
    assert result == ToolResult("written")
    assert (tmp_path / "notes.txt").read_text() == "hello\n"


def test_hardline_argument_is_refused_even_for_a_safe_tool(session, tmp_path, rec):
    _, registry = session
    result = call(registry, "mcp__test__echo", {"text": "rm -rf /"}, context(tmp_path, rec, approve=True))
    assert result.failed and "never runs under runner" in result.text
    assert rec.audit and rec.audit[0][1] == "hardline"


def test_results_are_truncated(session, tmp_path, rec):
    _, registry = session
    result = call(registry, "mcp__test__shout", {"times": 5000}, context(tmp_path, rec, output_chars=2000))
    assert len(result.text) < 2300 and "s3cr3t" in result.text  # the loop redacts it (test_cli)


def test_config_approvals_make_a_tool_safe(tmp_path, rec):
    servers = {"test": stdio(approvals={"write_note": "safe"})}
    s, registry = open_session(tmp_path, rec, servers, ["mcp:test/write_note"])
    try:
        assert list(registry.entries) == ["mcp__test__write_note"]
        assert call(registry, "mcp__test__write_note", {"text": "a"}, context(tmp_path, rec)) == ToolResult("written")
    finally:
        s.close()


def test_a_crashed_server_is_restarted_once(session, tmp_path, rec):
    _, registry = session
    ctx = context(tmp_path, rec, approve=True)
    crashed = call(registry, "mcp__test__crash", {}, ctx)
    assert crashed.failed and "MCP server test" in crashed.text
    assert call(registry, "mcp__test__echo", {"text": "back"}, ctx) == ToolResult("back")
    assert call(registry, "mcp__test__crash", {}, ctx).failed
    again = call(registry, "mcp__test__echo", {"text": "x"}, ctx)
    assert again.failed and "not restarted again" in again.text
    statuses = [p["status"] for k, p in rec.events if k == "mcp_server"]
    assert statuses == ["started", "crashed", "restarting", "started", "crashed"]


def test_http_server(http_server, tmp_path, rec):
    servers = {"web": McpServer(url=http_server, headers={"Authorization": "env:TEST_TOKEN"})}
    s, registry = open_session(tmp_path, rec, servers, ["mcp:web"], {"TEST_TOKEN": "Bearer t"})
    try:
        assert call(registry, "mcp__web__echo", {"text": "over http"}, context(tmp_path, rec)) == ToolResult("over http")
    finally:
        s.close()


def test_unknown_server_and_unknown_tool_are_config_errors(tmp_path, rec):
    with pytest.raises(ConfigError, match=r"toolsets: mcp:nope: no MCP server 'nope'"):
        open_session(tmp_path, rec, {"test": stdio()}, ["mcp:nope"])
    with pytest.raises(ConfigError, match=r"mcp:test/teleport: server test has no tool 'teleport' \(it has: crash, echo"):
        open_session(tmp_path, rec, {"test": stdio()}, ["mcp:test/teleport"])


def test_a_missing_command_is_a_clear_tool_error(tmp_path, rec):
    servers = {"gone": McpServer(command="/nonexistent/mcp-server")}
    started = time.monotonic()
    s, registry = open_session(tmp_path, rec, servers, ["mcp:gone/lookup"])
    try:
        assert "command not found" in s.down["mcp:gone"]
        result = call(registry, "mcp__gone__lookup", {}, context(tmp_path, rec, approve=True))
        assert result.failed and "command not found: /nonexistent/mcp-server" in result.text
    finally:
        s.close()
    assert time.monotonic() - started < 10
    assert [p["status"] for k, p in rec.events if k == "mcp_server"] == ["failed", "restarting", "failed"]


def test_a_silent_server_is_a_handshake_timeout(tmp_path, rec):
    servers = {"mute": McpServer(command="sleep", args=["30.0417"], start_timeout=1)}
    started = time.monotonic()
    s, registry = open_session(tmp_path, rec, servers, ["mcp:mute"])
    s.close()
    assert time.monotonic() - started < 10
    assert "handshake timeout" in s.down["mcp:mute"] and not registry.entries
    [failed] = [p for k, p in rec.events if k == "mcp_server"]
    assert failed["status"] == "failed" and "handshake timeout" in failed["error"]
    assert not processes_with_arg("30.0417")  # the silent server was stopped, not left behind


def processes_with_arg(arg: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if arg.encode() in (entry / "cmdline").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_a_missing_env_variable_is_named(tmp_path, rec):
    s, _ = open_session(tmp_path, rec, {"test": stdio(env={"TOKEN": "env:NOT_SET_ANYWHERE"})}, ["mcp:test"])
    assert "env: environment variable NOT_SET_ANYWHERE is not set" in s.down["mcp:test"]


def test_read_only_tools_join_parallel_turns_and_answer_concurrent_calls(session, tmp_path, rec):
    """``readOnlyHint`` marks the entry read-only (the loop may run it beside other read-only calls
    of one turn); eight calls at once through one session each get their own answer."""
    from concurrent.futures import ThreadPoolExecutor

    _, registry = session
    flags = {name: e.read_only for name, e in registry.entries.items()}
    assert flags["mcp__test__echo"] is True
    assert flags["mcp__test__write_note"] is False and flags["mcp__test__crash"] is False
    ctx = context(tmp_path, rec)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: call(registry, "mcp__test__echo", {"text": f"n{i}"}, ctx), range(8)))
    assert [r.text for r in results] == [f"n{i}" for i in range(8)]
