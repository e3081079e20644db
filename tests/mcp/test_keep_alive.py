"""``keep_alive: true`` under a real ``runner serve``: consecutive runs of a job call the same stdio
server process (through serve's bridge), a server killed between runs is restarted for the next
run, and the server stops with serve; without ``keep_alive`` each run starts its own."""

from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path

import pytest

from runner.testing import call, final
from tests.mcp.conftest import SERVER
from tests.run.test_run_job import events
from tests.servehelp import job_rows, pid_alive, serve_factory, wait_for


@pytest.fixture
def serve(project):
    yield from serve_factory(project)


def write_config(project, keep_alive: bool, extra: str = "") -> None:
    project.home.mkdir(exist_ok=True)
    (project.home / "config.yaml").write_text(
        "serve:\n  heartbeat_s: 0.5\n  kill_grace: 0.5\n  shutdown_grace: 3\n"
        "mcp_servers:\n"
        f"  test:\n    command: {sys.executable}\n    args: [{SERVER}]\n    keep_alive: {str(keep_alive).lower()}\n"
        + extra
    )


def setup(project, fake, keep_alive: bool) -> None:
    write_config(project, keep_alive)
    project.write_jobs("jobs:\n  m:\n    prompt: go\n    schedule: every 3s\n    toolsets: [mcp:test]\n")
    for _ in range(4):
        fake.add(call("mcp__test__whoami", {}), final("done"))
    fake.default = final("done")


def starts(fake) -> list[str]:
    """The start times of the server processes the tool calls reported, in order: a process's
    identity across PID namespaces (a server in a sandbox reports its pid in there)."""
    found: list[str] = []
    for request in fake.requests:
        last = request["body"]["messages"][-1]
        if last["role"] == "tool":
            match = re.search(r"pid=(\d+) start=(\d+)", last["content"])
            assert match, last["content"]
            found.append(match.group(2))
    return found


def pids(fake) -> list[int]:
    """The server processes the tool calls reported, as pids of this machine (0 once gone)."""
    return [host_pid(start) for start in starts(fake)]


def host_pid(start: str) -> int:
    """The process of this machine running the test server that started at ``start`` (0: none)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if stat[19] == start and str(SERVER).encode() in argv and not argv[0].endswith(b"bwrap"):
            return int(entry.name)
    return 0


def succeeded(project, count: int):
    return lambda: len([r for r in job_rows(project.home, "m") if r["status"] == "succeeded"]) >= count


@pytest.mark.slow
def test_runs_share_the_kept_server_which_restarts_after_a_kill_and_stops_with_serve(project, fake, serve):
    setup(project, fake, keep_alive=True)
    daemon = serve().started()
    wait_for(succeeded(project, 2), 40, what="two runs")
    first, second = pids(fake)[:2]
    assert first == second and second > 0  # the same server process answered both runs
    os.kill(second, signal.SIGKILL)  # between runs: the bridge restarts it for the next call
    wait_for(succeeded(project, 3), 20, what="a third run")
    third = pids(fake)[2]
    assert third != second and pid_alive(third)
    assert daemon.stop() == 0
    wait_for(lambda: not pid_alive(third), 10, what="the kept server to stop with serve")
    assert not list((project.home / "mcp-bridges").glob("*.json"))
    rows = [r for r in job_rows(project.home, "m") if r["status"] == "succeeded"]
    for row in rows[:3]:
        started = [p for k, p in events(project, row["id"]) if k == "mcp_server" and p["status"] == "started"]
        assert [p["where"] for p in started] == ["bridge"]


@pytest.mark.slow
def test_without_keep_alive_each_run_starts_its_own_server(project, fake, serve):
    setup(project, fake, keep_alive=False)
    daemon = serve().started()
    wait_for(succeeded(project, 2), 40, what="two runs")
    first, second = starts(fake)[:2]
    assert first != second and not host_pid(first)  # the first run's server ended with its run
    assert daemon.stop() == 0
    assert not (project.home / "mcp-bridges").exists()


@pytest.mark.slow
def test_changing_the_servers_entry_stops_its_bridge(project, fake, serve):
    setup(project, fake, keep_alive=True)
    daemon = serve().started()
    wait_for(succeeded(project, 1), 30, what="a run")
    [first] = pids(fake)[:1]
    write_config(project, True, "    call_timeout: 60\n")
    wait_for(lambda: not pid_alive(first), 15, what="the old server to stop after the config change")
    wait_for(succeeded(project, 2), 20, what="a run after the change")
    second = pids(fake)[1]
    assert second != first and pid_alive(second)
    assert daemon.stop() == 0
    assert "stopping the keep-alive MCP bridge for m/test: its config changed" in daemon.log()


def test_a_run_whose_bridge_is_gone_starts_its_own_server_and_says_so(tmp_path):
    from runner.config.mcp import McpServer
    from runner.mcp.keep import bridge_file
    from runner.mcp.session import McpSession
    from runner.tools import Registry
    from tests.mcp.test_session import Host, Recorder

    gone = subprocess_pid_that_exited()
    path = bridge_file(tmp_path, "m", "test")
    path.parent.mkdir()
    path.write_text(f'{{"pid": {gone}}}')
    rec = Recorder()
    servers = {"test": McpServer(command=sys.executable, args=[str(SERVER)], keep_alive=True)}
    session = McpSession(servers, Host(tmp_path), rec.emit, {}.get, home=tmp_path, job="m")
    try:
        session.add_to(Registry(), ["mcp:test"])
    finally:
        session.close()
    kinds = [(p["status"], p.get("where"), p.get("error")) for k, p in rec.events if k == "mcp_server"]
    assert kinds[0] == ("bridge_unavailable", None, "the keep-alive bridge is gone")
    assert kinds[1][:2] == ("started", "host")


def subprocess_pid_that_exited() -> int:
    import subprocess

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def started_bridge(tmp_path):
    """serve's bridges with one being started for job ``m``'s keep-alive server ``test``."""
    import logging

    from runner.mcp.keep import Bridges

    config = tmp_path / "config.yaml"
    config.write_text(
        f"mcp_servers:\n  test:\n    command: {sys.executable}\n    args: [{SERVER}]\n    keep_alive: true\n"
    )
    bridges = Bridges(tmp_path, config, {}.get, logging.getLogger("test"))
    bridges.prepare("m", ["mcp:test"], True, tmp_path)
    return bridges


def test_the_bridge_passes_annotations_through_and_answers_only_its_token(tmp_path):
    from runner.mcp.client import Connection, McpFailure
    from runner.mcp.keep import bridge_file, find_bridge
    from runner.mcp.launch import http_target

    bridges = started_bridge(tmp_path)
    try:
        address, why = find_bridge(tmp_path, "m", "test", 30)
        assert address is not None, why
        assert bridge_file(tmp_path, "m", "test").stat().st_mode & 0o777 == 0o600
        good = Connection(
            "ok", http_target(address.url, {"Authorization": f"Bearer {address.token}"}), start_timeout=10
        )
        tools = {t.name: t.read_only for t in good.start()}
        good.close()
        assert tools["echo"] is True and tools["write_note"] is False  # readOnlyHint reaches the run's gate
        bad = Connection("bad", http_target(address.url, {"Authorization": "Bearer wrong"}), start_timeout=10)
        with pytest.raises(McpFailure):
            bad.start()
    finally:
        bridges.close()
    assert not bridge_file(tmp_path, "m", "test").exists()
    assert find_bridge(tmp_path, "m", "test", 1) == (None, "")


def test_the_bridge_accepts_connections_once_its_address_is_published(tmp_path):
    """The address file is written once the bridge's socket listens: a run that connects at once
    (uvicorn may still be starting) is queued, not refused ("All connection attempts failed")."""
    import json
    import socket
    import time
    from urllib.parse import urlsplit

    from runner.mcp.keep import bridge_file

    bridges = started_bridge(tmp_path)
    try:
        path, deadline, url = bridge_file(tmp_path, "m", "test"), time.monotonic() + 30, None
        while url is None and time.monotonic() < deadline:  # as soon as the address is there
            try:
                url = json.loads(path.read_text()).get("url")
            except (OSError, ValueError):
                pass
        assert url is not None, "the bridge published no address"
        where = urlsplit(url)
        socket.create_connection((where.hostname, where.port), timeout=5).close()
    finally:
        bridges.close()
