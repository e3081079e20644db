"""Required tools (issue 32.7) through the real `runner run-job`: an MCP server the job names that
does not start (a command that does not exist, one that exits at once) fails the run
``failed/tools_unavailable`` before the model is asked, the alert saying so; with config.yaml's
``optional: true`` the run goes on without it (event ``unavailable``); a non-bool ``optional`` is
one line, exit 2."""

from __future__ import annotations

import sys

import pytest

from runner.testing import call, final
from tests.mcp.conftest import SERVER
from tests.receivers import Receiver
from tests.run.test_run_job import events, runs


def config(project, servers: str, extra: str = "") -> None:
    project.home.mkdir(parents=True, exist_ok=True)
    (project.home / "config.yaml").write_text(f"mcp_servers:\n{servers}{extra}")


GONE = "  vault:\n    command: /nonexistent/mcp-vault\n"
QUITS = "  vault:\n    command: sh\n    args: ['-c', 'exit 1']\n    start_timeout: 10\n"
GOOD = f"  test:\n    command: {sys.executable}\n    args: [{SERVER}]\n"


# the sandbox (bwrap) says "execvp /nonexistent/mcp-vault: No such file or directory"
@pytest.mark.parametrize(("server", "why"), [(GONE, "/nonexistent/mcp-vault"), (QUITS, "")])
def test_a_required_server_that_does_not_start_fails_the_run(project, fake, receiver: Receiver, server, why):
    fake.add(final("never asked"))
    config(project, server + GOOD, f"alerts: ['webhook:{receiver.url}/alerts']\n")
    project.write_jobs("jobs:\n  m:\n    prompt: go\n    toolsets: [mcp:test, mcp:vault]\n")
    res = project.run("run-job", "m")
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    [row] = runs(project)
    assert (row["status"], row["reason"]) == ("failed", "tools_unavailable")
    assert row["error"].startswith("job m: MCP server vault did not start: ") and "\n" not in row["error"]
    assert why in row["error"]
    assert row["error"].endswith("(config.yaml mcp_servers: `optional: true` runs the job without it)")
    assert fake.requests == []
    [alert] = [r.json() for r in receiver.wait(1)]
    assert alert["reason"] == "tools_unavailable" and "MCP server vault did not start" in alert["error"]
    statuses = [(p["server"], p["status"]) for k, p in events(project, row["id"]) if k == "mcp_server"]
    assert ("vault", "failed") in statuses and ("test", "stopped") in statuses  # the other server was stopped


def test_an_optional_server_that_does_not_start_is_recorded_and_the_run_goes_on(project, fake):
    fake.add(call("mcp__test__echo", {"text": "still here"}), final("done without the vault"))
    config(project, GONE + "    optional: true\n" + GOOD)
    project.write_jobs("jobs:\n  m:\n    prompt: go\n    toolsets: [mcp:test, mcp:vault]\n")
    res = project.run("run-job", "m")
    assert res.returncode == 0, res.stderr
    [row] = runs(project)
    assert row["status"] == "succeeded"
    offered = [t["function"]["name"] for t in fake.requests[0]["body"]["tools"]]
    assert "mcp__test__echo" in offered and not [t for t in offered if t.startswith("mcp__vault")]
    [note] = [p for k, p in events(project, row["id"]) if k == "mcp_server" and p["status"] == "unavailable"]
    assert note["server"] == "vault"
    assert note["error"].startswith("optional: the run goes on without its tools (") and "/nonexistent/mcp-vault" in note["error"]


@pytest.mark.parametrize("value", ['"yes"', "1", "maybe"])
def test_optional_must_be_a_bool(project, value):
    config(project, GONE + f"    optional: {value}\n")
    project.write_jobs("jobs:\n  m:\n    prompt: go\n    toolsets: [mcp:vault]\n")
    for args in (("jobs", "validate"), ("run-job", "m")):
        res = project.run(*args)
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        assert "config.yaml: mcp_servers.vault.optional: Input should be a valid boolean" in res.stderr
    assert runs(project) == []
