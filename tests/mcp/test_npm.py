"""Jobs against MCP servers from the npm registry (issue 34.5), through the real ``run-job``:
``@modelcontextprotocol/server-filesystem`` writes and reads inside its allowed folder and refuses
outside it; ``@playwright/mcp`` drives Debian's chromium to a page this test serves and the
page's text reaches the model. Only the model is fake."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from runner.testing import call, final
from tests.conftest import Project
from tests.mcp.npm import CHROMIUM, binary
from tests.run.test_run_job import events, runs


def tool_results(fake: Any, n: int) -> list[str]:
    return [m["content"] for m in fake.requests[n]["body"]["messages"] if m["role"] == "tool"]


def test_filesystem_server_inside_and_outside_its_folder(project: Project, fake: Any) -> None:
    server = binary("mcp-server-filesystem")
    work = project.root / "work"
    allowed = work / "allowed"
    allowed.mkdir(parents=True)
    project.home.mkdir(exist_ok=True)
    (project.home / "config.yaml").write_text(
        f"mcp_servers:\n  fs:\n    command: {server}\n    args: [{allowed}]\n    approvals: safe\n    start_timeout: 60\n"
    )
    project.write_jobs(f"jobs:\n  files:\n    prompt: go\n    workdir: {work}\n    toolsets: [mcp:fs]\n")
    inside, outside = allowed / "note.txt", work / "outside.txt"
    fake.add(
        call("mcp__fs__write_file", {"path": str(inside), "content": "written by the model"}),
        call("mcp__fs__read_text_file", {"path": str(inside)}),
        call("mcp__fs__write_file", {"path": str(outside), "content": "must not appear"}),
        final("done"),
    )
    res = project.run("run-job", "files", timeout=120)
    assert res.returncode == 0, res.stderr
    offered = {t["function"]["name"] for t in fake.requests[0]["body"]["tools"]}
    assert {"mcp__fs__write_file", "mcp__fs__read_text_file", "mcp__fs__list_directory"} <= offered
    assert inside.read_text() == "written by the model"
    assert tool_results(fake, 2)[-1] == "written by the model"  # the read came back to the model
    refused = tool_results(fake, 3)[-1]
    assert "denied" in refused.lower() and "outside allowed directories" in refused
    assert not outside.exists()
    [row] = runs(project)
    assert row["status"] == "succeeded"
    results = [p for k, p in events(project, row["id"]) if k == "tool_result"]
    assert len(results) == 3
    assert [r.get("failed", False) for r in results] == [False, False, True]  # the run records the tool error
    assert "outside allowed directories" in results[-1]["result"]


PAGE = "<html><head><title>Runner test page</title></head><body><h1>Quarterly numbers</h1><p>The answer is 4217.</p></body></html>"


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = PAGE.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_playwright_server_reads_a_page_in_chromium(project: Project, fake: Any) -> None:
    server = binary("playwright-mcp")
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/report"
    try:
        project.home.mkdir(exist_ok=True)
        (project.home / "config.yaml").write_text(
            "mcp_servers:\n  browser:\n"
            f"    command: {server}\n"
            f"    args: [--browser, chromium, --executable-path, {CHROMIUM}, --headless, --no-sandbox, --isolated]\n"
            "    approvals: safe\n    start_timeout: 60\n    call_timeout: 90\n"
        )
        project.write_jobs("jobs:\n  browse:\n    prompt: go\n    toolsets: [mcp:browser]\n")
        fake.add(
            call("mcp__browser__browser_navigate", {"url": url}),
            call("mcp__browser__browser_snapshot", {}),
            final("read it"),
        )
        res = project.run("run-job", "browse", timeout=180)
        assert res.returncode == 0, res.stderr
        offered = {t["function"]["name"] for t in fake.requests[0]["body"]["tools"]}
        assert {"mcp__browser__browser_navigate", "mcp__browser__browser_snapshot"} <= offered
        snapshot = tool_results(fake, 2)[-1]
        assert "Quarterly numbers" in snapshot and "The answer is 4217." in snapshot, snapshot[:2000]
        [row] = runs(project)
        assert row["status"] == "succeeded"
    finally:
        httpd.shutdown()
        httpd.server_close()
