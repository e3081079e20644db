"""The ``mcp`` SDK is imported only by runs (and commands) that use an MCP server."""

from __future__ import annotations

import re

from runner.testing import final

SDK = re.compile(r"\|\s+(mcp|mcp_types)(\.\w+)*\s*$", re.M)
HTTP2 = re.compile(r"\|\s+httpx2(\.\w+)*\s*$", re.M)  # the SDK's transport, also the model client's


def test_runs_and_commands_without_mcp_never_import_the_sdk(project, fake):
    project.home.mkdir(exist_ok=True)
    (project.home / "config.yaml").write_text("mcp_servers:\n  gh:\n    command: some-server\n")
    project.write_jobs("jobs:\n  plain:\n    prompt: go\n    toolsets: [files]\n  uses:\n    prompt: go\n    toolsets: [mcp:gh]\n")
    fake.add(final("done"))
    env = project.env(PYTHONPROFILEIMPORTTIME="1")
    for args in (("run-job", "plain"), ("jobs", "list"), ("jobs", "validate")):
        res = project.run(*args, env=env)
        assert res.returncode == 0, res.stderr[-2000:]
        assert "| runner" in res.stderr  # the import log is there
        assert not SDK.search(res.stderr), (args, SDK.findall(res.stderr))
        if args[0] == "jobs":  # a run imports httpx2 for its model client (openai); a listing never
            assert not HTTP2.search(res.stderr), (args, HTTP2.findall(res.stderr))
