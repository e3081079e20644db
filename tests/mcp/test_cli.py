"""MCP servers and the operator's own tools through the real CLI: ``run-job`` with the fake
model calling them, ``jobs validate`` and ``tools list``."""

from __future__ import annotations

import json
import sys

from runner.testing import call, calls, final
from tests.mcp.conftest import SERVER
from tests.run.test_run_job import events, runs

SECRET = "tok-0123456789abcdefXYZ"


def mcp_config(project, approvals: str = "") -> None:
    project.home.mkdir(exist_ok=True)
    (project.home / "config.yaml").write_text(
        "mcp_servers:\n"
        f"  test:\n    command: {sys.executable}\n    args: [{SERVER}]\n    env: [TEST_SECRET]\n{approvals}"
    )


def test_run_job_calls_mcp_tools_through_the_gate(project, fake):
    mcp_config(project)
    project.write_jobs("jobs:\n  m:\n    prompt: go\n    toolsets: [mcp:test]\n")
    fake.add(
        calls(("mcp__test__echo", {"text": "hi"}), ("mcp__test__write_note", {"text": "x"})),
        call("mcp__test__shout", {"times": 3}),
        final("done"),
    )
    res = project.run("run-job", "m", "--json", env=project.env(TEST_SECRET=SECRET))
    assert res.returncode == 0, res.stderr
    offered = [t["function"]["name"] for t in fake.requests[0]["body"]["tools"]]
    assert offered == sorted(offered) and "mcp__test__echo" in offered and "mcp__test__write_note" in offered
    tool_msgs = [m["content"] for m in fake.requests[2]["body"]["messages"] if m["role"] == "tool"]
    assert tool_msgs[0] == "hi"
    assert "not allowed in this run" in tool_msgs[1]  # unattended: auto-deny
    assert not (project.root / "notes.txt").exists()
    assert "secret" in tool_msgs[2] and SECRET not in tool_msgs[2]  # redacted like any tool result
    [row] = runs(project)
    statuses = [p["status"] for k, p in events(project, row["id"]) if k == "mcp_server"]
    assert statuses == ["started", "stopped"]
    approvals = project.cli("approvals", "list", "--json")
    [decision] = json.loads(approvals.stdout)
    assert decision["command"].startswith("mcp__test__write_note") and decision["decision"] == "denied"


def test_approvals_in_config_let_a_tool_run(project, fake):
    mcp_config(project, "    approvals: safe\n")
    project.write_jobs("jobs:\n  m:\n    prompt: go\n    toolsets: [mcp:test/write_note]\n")
    fake.add(call("mcp__test__write_note", {"text": "from the model"}), final("done"))
    res = project.run("run-job", "m", env=project.env(TEST_SECRET="x"))
    assert res.returncode == 0, res.stderr
    assert [t["function"]["name"] for t in fake.requests[0]["body"]["tools"]] == ["mcp__test__write_note"]
    assert (project.root / "notes.txt").read_text() == "from the model\n"


def test_an_unknown_tool_of_a_server_fails_the_run_clearly(project, fake):
    mcp_config(project)
    project.write_jobs("jobs:\n  m:\n    prompt: go\n    toolsets: [mcp:test/teleport]\n")
    res = project.run("run-job", "m", env=project.env(TEST_SECRET="x"))
    assert res.returncode != 0
    assert "mcp:test/teleport: server test has no tool 'teleport'" in res.stderr
    assert [r["status"] for r in runs(project)] == ["failed"]


TOOLS = '''
from runner.tools import tool


@tool
def add(a: int, b: int = 2) -> int:
    """Add two numbers.

    Args:
        a: the first number
        b: the second number
    """
    return a + b


@tool(toolset="ops")
def leak(name: str) -> str:
    """Fail, quoting a secret."""
    raise RuntimeError(f"cannot reach {name} with key {KEY}")


@tool(check=lambda: "no vault configured", toolset="ops")
def vault() -> str:
    """Read the vault."""
    return "never"


KEY = "sk-live-0123456789abcdef0123"
'''


def test_operator_tools_run_in_a_job(project, fake):
    project.write("tools/mine.py", TOOLS)
    project.write_jobs("jobs:\n  o:\n    prompt: go\n    toolsets: [add, ops]\n")
    fake.add(calls(("add", {"a": 3}), ("leak", {"name": "db"})), final("done"))
    res = project.run("run-job", "o")
    assert res.returncode == 0, res.stderr
    tools = {t["function"]["name"]: t["function"] for t in fake.requests[0]["body"]["tools"]}
    assert sorted(tools) == ["add", "leak"]  # vault's check says no
    assert tools["add"]["description"] == "Add two numbers."
    assert tools["add"]["parameters"]["properties"]["a"] == {"type": "integer", "description": "the first number"}
    assert tools["add"]["parameters"]["required"] == ["a"]
    tool_msgs = [m["content"] for m in fake.requests[1]["body"]["messages"] if m["role"] == "tool"]
    assert tool_msgs[0] == "5"
    assert tool_msgs[1].startswith("error: RuntimeError: cannot reach db") and "sk-live-0123456789abcdef0123" not in tool_msgs[1]
    [row] = runs(project)
    [prompt] = [p for k, p in events(project, row["id"]) if k == "prompt"]
    assert prompt["unavailable"] == {"vault": "no vault configured"}


def test_the_agent_cannot_write_the_tools_folder(project, fake):
    project.write("tools/mine.py", TOOLS)
    project.write_jobs("jobs:\n  w:\n    prompt: go\n    toolsets: [files, add]\n")
    fake.add(call("write_file", {"path": "tools/evil.py", "content": "import os"}), final("done"))
    res = project.run("run-job", "w")
    assert res.returncode == 0, res.stderr
    [msg] = [m["content"] for m in fake.requests[1]["body"]["messages"] if m["role"] == "tool"]
    assert "control files" in msg and not (project.root / "tools" / "evil.py").exists()


def test_validate_names_the_broken_tools_file_and_line(project):
    project.write("tools/broken.py", "from runner.tools import tool\n\n\n@tool\ndef f(x) -> str:\n    '''F.'''\n    return x\n")
    project.write("tools/syntax.py", "def (:\n")
    project.write_jobs("jobs:\n  a:\n    prompt: go\n    toolsets: [files]\n")
    res = project.run("jobs", "validate")
    assert res.returncode == 2
    assert f"{project.root / 'tools' / 'broken.py'}:4: tool 'f': parameter 'x' needs a type hint" in res.stderr
    assert f"{project.root / 'tools' / 'syntax.py'}:1: syntax error" in res.stderr
    assert "Traceback" not in res.stderr


def test_validate_names_unknown_servers_and_tools(project):
    mcp_config(project)
    project.write_jobs("jobs:\n  a:\n    prompt: go\n    toolsets: [mcp:nope, teleport]\n  b:\n    prompt: go\n    toolsets: [mcp:nope]\n")
    res = project.run("jobs", "validate")
    assert res.returncode == 2
    assert "job a: toolsets: unknown toolset or tool 'teleport'" in res.stderr
    project.write_jobs("jobs:\n  b:\n    prompt: go\n    toolsets: [mcp:test, mcp:nope/x]\n")
    res = project.run("jobs", "validate")
    assert res.returncode == 2
    assert "job b: toolsets: mcp:nope/x: no MCP server 'nope' in config.yaml mcp_servers (test)" in res.stderr


def test_tools_list_shows_sources_and_availability(project):
    mcp_config(project)
    project.write("tools/mine.py", TOOLS)
    project.write_jobs("jobs:\n  a:\n    prompt: go\n    toolsets: [files, ops, mcp:test/echo]\n")
    res = project.run("tools", "list", "--json", env=project.env(TEST_SECRET="x"))
    assert res.returncode == 0, res.stderr
    rows = {r["name"]: r for r in json.loads(res.stdout)["tools"]}
    assert rows["terminal"]["source"] == "builtin" and rows["terminal"]["available"]
    assert rows["add"]["source"] == f"operator {project.root / 'tools' / 'mine.py'}" and rows["add"]["toolset"] == "user"
    assert rows["vault"]["available"] is False and rows["vault"]["why_not"] == "no vault configured"
    assert rows["mcp__test__write_note"]["toolset"] == "mcp:test"
    res = project.run("tools", "list", "--job", "a", "--json", env=project.env(TEST_SECRET="x"))
    names = [r["name"] for r in json.loads(res.stdout)["tools"]]
    assert names == ["edit_file", "list_dir", "read_file", "search_files", "write_file", "mcp__test__echo", "leak", "vault"]


def test_bad_mcp_server_config_is_one_line_exit_2(project):
    project.home.mkdir(exist_ok=True)
    project.write_jobs("jobs:\n  a:\n    prompt: go\n")
    cases = [
        ("mcp_servers:\n  gh: {command: x, url: 'http://h/mcp'}\n", "give either command"),
        ("mcp_servers:\n  gh: {command: x, env: {TOKEN: literal-secret}}\n", "values are env:NAME"),
        ("mcp_servers:\n  Bad__Name: {command: x}\n", "server name 'Bad__Name' must match"),
        ("mcp_servers:\n  gh: {command: x, approvals: sometimes}\n", "mcp_servers.gh.approvals"),
    ]
    for text, message in cases:
        (project.home / "config.yaml").write_text(text)
        res = project.run("tools", "list")
        assert res.returncode == 2, (text, res.stderr)
        assert message in res.stderr and "Traceback" not in res.stderr, res.stderr


def test_tools_list_exits_2_on_a_broken_tools_file(project):
    project.write("tools/broken.py", "import no_such_module_here\n")
    project.write_jobs("jobs:\n  a:\n    prompt: go\n")
    res = project.run("tools", "list")
    assert res.returncode == 2
    assert f"{project.root / 'tools' / 'broken.py'}:1: ModuleNotFoundError: No module named 'no_such_module_here'" in res.stderr
    assert "terminal" in res.stdout
