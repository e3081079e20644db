"""A stdio MCP server of a job on the Docker or SSH backend runs inside that backend (runner.mcp
through the backend's ``stdio_command``): real dockerd with the busybox image (a server written
in sh, as the image has no Python), real sshd on localhost (the Python test server)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from runner.config.mcp import McpServer
from runner.events import encode
from runner.mcp.session import McpSession
from runner.safety.approval import AutoDeny, Gate
from runner.tools import Registry
from runner.tools.context import ToolContext

SH_SERVER = Path(__file__).with_name("mcp_sh_server.sh")
PY_SERVER = Path(__file__).resolve().parents[1] / "mcp" / "server.py"


def session_for(backend: Any, server: McpServer, env: dict[str, str]) -> tuple[McpSession, Registry, list[Any]]:
    events: list[Any] = []
    session = McpSession({"box": server}, backend, lambda k, p: events.append((k, encode(p))), env.get)
    registry = Registry()
    session.add_to(registry, ["mcp:box"])
    return session, registry, events


def ctx_for(backend: Any) -> ToolContext:
    gate = Gate("deny", (), AutoDeny(), lambda c, d: None)
    return ToolContext(backend=backend, approve=gate, approve_tool=gate.tool)


@pytest.mark.docker
def test_stdio_server_runs_inside_the_container(make_backend):
    backend, ctx = make_backend("docker")
    backend.write_file("mcp.sh", SH_SERVER.read_bytes())
    server = McpServer(command="sh", args=["mcp.sh"], env={"MCP_TOKEN": "env:BOX_TOKEN"})
    session, registry, events = session_for(backend, server, {"BOX_TOKEN": "t0k"})
    try:
        assert list(registry.entries) == ["mcp__box__where"]
        result = registry.entries["mcp__box__where"].handler({}, ctx_for(backend))
    finally:
        session.close()
    assert not result.failed, result.text
    assert f"host={backend.container_id[:12]}" in result.text  # the container's hostname
    assert "pwd=/workspace" in result.text and "token=t0k" in result.text
    assert events[0][1]["where"] == "backend"


@pytest.mark.ssh
def test_stdio_server_runs_through_ssh(make_backend):
    backend, ctx = make_backend("ssh")
    server = McpServer(command=sys.executable, args=[str(PY_SERVER)], env=["TEST_SECRET"])
    session, registry, events = session_for(backend, server, {"TEST_SECRET": "x"})
    try:
        result = registry.entries["mcp__box__whoami"].handler({}, ctx_for(backend))
        pid = int(result.text.rsplit("pid=", 1)[1].split()[0])
        parent = Path(f"/proc/{pid}/status").read_text().split("PPid:")[1].split()[0]
        parent_name = Path(f"/proc/{parent}/comm").read_text().strip()
    finally:
        session.close()
    assert f"cwd={backend.workdir}" in result.text and "secret=set" in result.text
    assert events[0][1]["where"] == "backend"
    assert "sshd" in parent_name  # the sshd is this host: the server is sshd's child, not ours
