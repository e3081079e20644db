"""``runner mcp serve`` driven by the ``mcp`` SDK's own client, as another agent would use it: a
real ``runner mcp serve`` subprocess over stdio (``ClientSession`` on ``stdio_client``) and over
streamable HTTP (``streamable_http_client``, with the dashboard's token, the read-only token and
none), against a store holding real runs made by real ``runner run-job`` processes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from runner.testing import call, error, final
from tests.conftest import Project
from tests.control.test_parked import finish, manual_job, wait_parked
from tests.mcp.conftest import free_port
from tests.servehelp import ServeProc, rows, wait_for

SECRET = "sk-test-key-0123456789abcdef"  # the project's OPENAI_API_KEY: the redactor knows it

Session = Any
Check = Callable[[Session], Awaitable[None]]


def over_stdio(project: Project, check: Check) -> None:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "runner", "mcp", "serve"], env=project.env(), cwd=str(project.root)
    )

    async def main() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await check(session)

    asyncio.run(asyncio.wait_for(main(), 90))


def over_http(url: str, token: str | None, check: Check) -> None:
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else {}

    async def main() -> None:
        import httpx2

        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as client,
            streamable_http_client(url, http_client=client) as streams,
            ClientSession(streams[0], streams[1]) as session,
        ):
            await session.initialize()
            await check(session)

    asyncio.run(asyncio.wait_for(main(), 90))


async def tool(session: Session, tool_name: str, **args: Any) -> Any:
    result = await session.call_tool(tool_name, args)
    text = result.content[0].text
    if result.is_error:
        return ("error", text)
    return json.loads(text)


async def names(session: Session) -> list[str]:
    return sorted(t.name for t in (await session.list_tools()).tools)


def two_runs(project: Project, fake: Any) -> list[dict[str, Any]]:
    """Two real runs of job ``a``: one succeeded (its output quotes the API key), one failed."""
    project.write_jobs("jobs:\n  a:\n    prompt: go\n    description: the first job\n  b:\n    prompt: go\n")
    fake.add(final(f"report done; key {SECRET}"))
    assert project.run("run-job", "a").returncode == 0
    fake.add(error(400, "bad request"))
    assert project.run("run-job", "a").returncode != 0
    fake.script.clear()
    return rows(project.home, "SELECT * FROM runs ORDER BY created_at")


def test_stdio_every_tool_against_real_runs(project: Project, fake: Any) -> None:
    runs = two_runs(project, fake)
    ok = next(r for r in runs if r["status"] == "succeeded")
    serve = ServeProc(project).started()
    try:

        async def check(session: Session) -> None:
            assert await names(session) == [
                "list_jobs", "list_runs", "pending_approvals", "run_output", "run_status", "trigger_job",
            ]  # fmt: skip
            jobs = await tool(session, "list_jobs")
            assert [j["name"] for j in jobs] == ["a", "b"]
            assert jobs[0]["description"] == "the first job" and jobs[0]["last_status"] == runs[-1]["status"]
            listed = await tool(session, "list_runs", job="a")
            assert {r["id"] for r in listed} == {r["id"] for r in runs}
            assert [r["id"] for r in await tool(session, "list_runs", status="succeeded")] == [ok["id"]]
            assert await tool(session, "list_runs", job="b") == []
            assert (await tool(session, "list_runs", status="nope"))[0] == "error"
            status = await tool(session, "run_status", run_id=ok["id"][:-2])
            assert isinstance(status, dict), status
            assert status["id"] == ok["id"] and status["status"] == "succeeded" and status["job"] == "a"
            output = await tool(session, "run_output", run_id=ok["id"])
            assert output["id"] == ok["id"] and output["output"].startswith("report done")
            assert SECRET not in json.dumps(output) and "[REDACTED]" in output["output"]  # redacted like the CLI
            missing = await tool(session, "run_status", run_id="zzzzzzzz")
            assert missing[0] == "error" and "no run" in missing[1]
            assert await tool(session, "pending_approvals") == []
            fake.add(final("triggered answer"))
            started = await tool(session, "trigger_job", name="b")
            assert started["job"] == "b" and started["id"] and started["request"].startswith("t")
            assert "serve" in started["status"] and started["serve_pid"] == serve.pid
            assert (await tool(session, "trigger_job", name="nope"))[0] == "error"
            refused = await tool(session, "trigger_job", name="b", vars={"bad-name": "1"})
            assert refused[0] == "error" and "not a template variable name" in refused[1]
            refused = await tool(session, "trigger_job", name="b", vars={"x": "y" * 4001})
            assert refused[0] == "error" and "the limit is 4,000" in refused[1]
            run_id = started["id"]

            async def done() -> bool:
                return (await tool(session, "run_status", run_id=run_id))["status"] == "succeeded"

            for _ in range(300):
                if await done():
                    break
                await asyncio.sleep(0.1)
            assert (await tool(session, "run_output", run_id=run_id))["output"] == "triggered answer"
            [row] = [r for r in await tool(session, "list_runs", job="b")]
            assert row["id"] == run_id and row["trigger"] == "manual"

        over_stdio(project, check)
    finally:
        serve.stop()
    [request] = rows(project.home, "SELECT * FROM control_requests WHERE kind='trigger'")
    assert request["requested_by"].startswith("mcp:")


def test_trigger_job_with_vars_renders_them_into_the_run_prompt(project: Project, fake: Any) -> None:
    project.write_jobs("jobs:\n  v:\n    prompt: 'greet {{ vars.who }}'\n    vars: {who: nobody}\n")
    fake.add(final("greeted"))
    serve = ServeProc(project).started()
    try:

        async def check(session: Session) -> None:
            started = await tool(session, "trigger_job", name="v", vars={"who": "Ada Lovelace"})
            assert isinstance(started, dict) and started["id"], started
            for _ in range(300):
                if (await tool(session, "run_status", run_id=started["id"]))["status"] == "succeeded":
                    break
                await asyncio.sleep(0.1)
            assert (await tool(session, "run_output", run_id=started["id"]))["output"] == "greeted"

        over_stdio(project, check)
    finally:
        serve.stop()
    user = [str(m["content"]) for m in fake.requests[0]["body"]["messages"] if m["role"] == "user"]
    assert "greet Ada Lovelace" in "\n".join(user)
    [request] = rows(project.home, "SELECT * FROM control_requests WHERE kind='trigger'")
    assert json.loads(request["vars"]) == {"who": "Ada Lovelace"}


def test_without_serve_a_trigger_waits_in_the_store(project: Project, fake: Any) -> None:
    project.write_jobs("jobs:\n  b:\n    prompt: go\n")

    async def check(session: Session) -> None:
        queued = await tool(session, "trigger_job", name="b")
        assert queued["id"] is None and "serve is not running" in queued["status"]

    over_stdio(project, check)
    [request] = rows(project.home, "SELECT * FROM control_requests WHERE kind='trigger'")
    assert request["job"] == "b" and request["handled_at"] is None


def parked_run(project: Project, fake: Any, config: str = "") -> tuple[subprocess.Popen[str], dict[str, Any]]:
    (project.root / "build").mkdir()
    fake.add(call("terminal", {"command": f"rm -rf build && echo {SECRET} > /dev/null"}), final("cleaned"))
    if config:
        project.home.mkdir(exist_ok=True)
        (project.home / "config.yaml").write_text(config)
    manual_job(project)
    proc = project.start_job("m", fake)
    return proc, wait_parked(project, proc)


def test_approvals_are_listed_and_not_answerable_unless_allowed(project: Project, fake: Any) -> None:
    proc, request = parked_run(project, fake)
    try:

        async def check(session: Session) -> None:
            assert "answer_approval" not in await names(session)
            [shown] = await tool(session, "pending_approvals")
            assert shown["id"] == request["id"] and shown["run_id"] == request["run_id"]
            assert SECRET not in json.dumps(shown) and shown["command"].startswith("rm -rf build")
            refused = await session.call_tool("answer_approval", {"id": request["id"], "grant": True, "reason": "x"})
            assert refused.is_error

        over_stdio(project, check)
        [still] = rows(project.home, "SELECT * FROM approval_requests")
        assert still["status"] == "pending"
    finally:
        project.run("approvals", "deny", request["id"])
        finish(proc)


def test_approvals_answered_when_config_allows(project: Project, fake: Any) -> None:
    proc, request = parked_run(project, fake, "mcp_serve:\n  allow_approvals: true\n")

    async def check(session: Session) -> None:
        answered = await tool(session, "answer_approval", id=request["id"], grant=True, reason="fine")
        assert answered["status"] == "granted" and answered["run_id"] == request["run_id"]
        again = await tool(session, "answer_approval", id=request["id"], grant=False)
        assert again[0] == "error" and "already granted" in again[1]

    over_stdio(project, check)
    code, out = finish(proc)
    assert code == 0, out
    assert not (project.root / "build").exists()
    [answered] = rows(project.home, "SELECT * FROM approval_requests")
    assert answered["decided_by"].startswith("mcp:") and answered["reason"] == "fine"


def test_http_needs_the_dashboard_token(project: Project, fake: Any) -> None:
    runs = two_runs(project, fake)
    project.home.mkdir(exist_ok=True)
    (project.home / "config.yaml").write_text("mcp_serve:\n  allow_approvals: true\n")
    refused = project.run("mcp", "serve", "--http", "127.0.0.1:1")
    assert refused.returncode == 2 and "runner web token" in refused.stderr and "Traceback" not in refused.stderr
    token = project.run("web", "token").stdout.strip()
    viewer = project.run("web", "token", "--read-only").stdout.strip()
    port = free_port()
    log = (project.root / "mcp-http.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "runner", "mcp", "serve", "--http", f"127.0.0.1:{port}"],
        env=project.env(),
        cwd=project.root,
        stdout=log,
        stderr=log,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        wait_for(lambda: "runner mcp serve: http://" in (project.root / "mcp-http.log").read_text(), 30)
        assert httpx.post(url, json={}).status_code == 401
        assert httpx.post(url, json={}, headers={"Authorization": "Bearer wrong"}).status_code == 401
        with pytest.raises(BaseException):  # noqa: B017 - the SDK's client raises its own error for the 401
            over_http(url, None, names)  # type: ignore[arg-type]

        async def full(session: Session) -> None:
            assert "trigger_job" in await names(session) and "answer_approval" in await names(session)
            listed = await tool(session, "list_runs")
            assert {r["id"] for r in listed} == {r["id"] for r in runs}

        async def read_only(session: Session) -> None:
            assert await names(session) == [
                "list_jobs", "list_runs", "pending_approvals", "run_output", "run_status",
            ]  # fmt: skip
            assert (await tool(session, "run_status", run_id=runs[0]["id"]))["id"] == runs[0]["id"]
            assert (await session.call_tool("trigger_job", {"name": "b"})).is_error

        over_http(url, token, full)
        over_http(url, viewer, read_only)
    finally:
        server.terminate()
        server.wait(timeout=20)
        log.close()
    assert rows(project.home, "SELECT * FROM control_requests") == []
