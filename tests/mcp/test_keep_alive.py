"""``keep_alive: true`` under a real ``runner serve``: consecutive runs of a job call the same stdio
server process (through serve's bridge), a server killed between runs is restarted for the next
run, and the server stops with serve; without ``keep_alive`` each run starts its own."""

from __future__ import annotations

import os
import re
import signal
import sys

import pytest

from runner.testing import call, final
from tests.mcp.conftest import SERVER
from tests.run.test_run_job import events
from tests.servehelp import job_rows, pid_alive, serve_factory, wait_for


@pytest.fixture
def serve(project):
    yield from serve_factory(project)


def setup(project, fake, keep_alive: bool) -> None:
    project.home.mkdir(exist_ok=True)
    (project.home / "config.yaml").write_text(
        "serve:\n  heartbeat_s: 0.5\n  kill_grace: 0.5\n  shutdown_grace: 3\n"
        "mcp_servers:\n"
        f"  test:\n    command: {sys.executable}\n    args: [{SERVER}]\n    keep_alive: {str(keep_alive).lower()}\n"
    )
    project.write_jobs("jobs:\n  m:\n    prompt: go\n    schedule: every 3s\n    toolsets: [mcp:test]\n")
    for _ in range(4):
        fake.add(call("mcp__test__whoami", {}), final("done"))
    fake.default = final("done")


def pids(fake) -> list[int]:
    """The server PIDs the tool calls reported, in order."""
    found: list[int] = []
    for request in fake.requests:
        last = request["body"]["messages"][-1]
        if last["role"] == "tool":
            match = re.search(r"pid=(\d+)", last["content"])
            assert match, last["content"]
            found.append(int(match.group(1)))
    return found


def succeeded(project, count: int):
    return lambda: len([r for r in job_rows(project.home, "m") if r["status"] == "succeeded"]) >= count


@pytest.mark.slow
def test_runs_share_the_kept_server_which_restarts_after_a_kill_and_stops_with_serve(project, fake, serve):
    setup(project, fake, keep_alive=True)
    daemon = serve().started()
    wait_for(succeeded(project, 2), 40, what="two runs")
    first, second = pids(fake)[:2]
    assert first == second  # the same server process answered both runs
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
    first, second = pids(fake)[:2]
    assert first != second and not pid_alive(first)
    assert daemon.stop() == 0
    assert not (project.home / "mcp-bridges").exists()


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
