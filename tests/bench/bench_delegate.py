"""Subagents and parallel read-only calls (issue 19).

1. Three subagents whose model answers take 2 s each, started by one ``delegate_task`` call in
   a real ``runner run-job`` against FakeOpenAI: the tool call's wall time (target <= 3 s).
2. Child start: the parent's ``delegate_task`` answer leaving the model server -> the child's
   first model request arriving there (target <= 50 ms).
3. Eight read-only calls (``web_fetch`` of a local page answering after 100 ms) in one model
   turn through ``run_loop``: the turn's wall time (target <= 300 ms), here and on main before
   (/work/base with /tmp/venv-base), where they run one after another.

Run: python tests/bench/bench_delegate.py
"""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import REPO, clean_env, row

BASE = Path("/work/base")
BASE_PYTHON = Path("/tmp/venv-base/bin/python")

JOBS = """\
jobs:
  boss:
    prompt: Split the work.
    toolsets: [terminal, files, delegate]
    deliver: [file]
"""

READ_ONLY = r"""
import statistics, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
import tempfile
try:
    from runner.backends.base import BackendContext
    from runner.backends.local import LocalBackend
except ModuleNotFoundError:  # main before the move to runner/backends/
    from backends.base import BackendContext
    from backends.local import LocalBackend
from runner.agent.loop import Limits, run_loop
from runner.safety.result import ApprovalResult
from runner.safety.ssrf import WebPolicy
from runner.testing import ScriptedLLM, calls, final
from runner.tools import discover
from runner.tools.context import ToolContext

class Slow(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        time.sleep(0.1)
        body = b"slow page"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

httpd = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
threading.Thread(target=httpd.serve_forever, daemon=True).start()
url = f"http://127.0.0.1:{httpd.server_address[1]}/p"
work = Path(tempfile.mkdtemp())
backend = LocalBackend(BackendContext(workdir=work, home=work))
ctx = ToolContext(backend=backend, approve=lambda c: ApprovalResult(True, ""), web=WebPolicy(allow_private=True))
tools = [discover().entries["web_fetch"]]
walls = []
for _ in range(7):
    llm = ScriptedLLM(calls(*[("web_fetch", {"url": f"{url}{i}"}) for i in range(8)]), final("done"))
    started = time.perf_counter()
    run_loop([{"role": "user", "content": "go"}], tools, ctx, llm, Limits(), emit=lambda k, d: None)
    walls.append(time.perf_counter() - started)
backend.close()
print(statistics.median(walls))
"""


def read_only_wall(python: str, repo: Path) -> float:
    env = clean_env(PYTHONPATH=str(repo), HOME=tempfile.mkdtemp())
    res = subprocess.run([python, "-c", READ_ONLY], env=env, cwd=repo, capture_output=True, text=True, timeout=120)
    if res.returncode != 0:
        raise SystemExit(f"read-only bench failed in {repo}: {res.stderr[-800:]}")
    return float(res.stdout.strip().splitlines()[-1])


def delegate_runs(n: int) -> tuple[list[float], list[float]]:
    """``n`` runs of a job whose one delegate_task call starts three 2 s children: the tool's
    wall seconds, and each run's child start (answer sent -> first child request) in seconds."""
    sys.path.insert(0, str(REPO))
    from runner.testing import FakeOpenAI, Reply, call, final, when

    walls, starts = [], []
    for _ in range(n):
        root = Path(tempfile.mkdtemp())
        (root / "jobs.yaml").write_text(JOBS)
        fake = FakeOpenAI().start()
        fake.add(call("delegate_task", {"goal": ["job MARK-1", "job MARK-2", "job MARK-3"]}))
        for i in (1, 2, 3):
            fake.add(when(f"job MARK-{i}", Reply(content=f"child {i} done", hang=2.0)))
        fake.add(final("all done"))
        env = clean_env(
            HOME=str(root),
            RUNNER_HOME=str(root / "home"),
            RUNNER_JOBS=str(root / "jobs.yaml"),
            OPENAI_BASE_URL=fake.base_url,
            OPENAI_API_KEY="sk-bench-0123456789",
        )
        res = subprocess.run(
            [sys.executable, "-m", "runner", "run-job", "boss"],
            env=env,
            cwd=root,
            capture_output=True,
            text=True,
            timeout=60,
        )
        fake.stop()
        if res.returncode != 0:
            raise SystemExit(f"run-job failed: {res.stderr[-800:]}")
        walls.append(_tool_seconds(root / "home" / "runner.db"))
        sent = fake.requests[0]["time"]
        starts.extend(r["time"] - sent for r in fake.requests[1:4])
    return walls, starts


def _tool_seconds(db: Path) -> float:
    conn = sqlite3.connect(db)
    for (payload,) in conn.execute("SELECT payload FROM run_events WHERE kind='tool_result' ORDER BY run_id, seq"):
        data = json.loads(payload)
        if data["name"] == "delegate_task":
            return float(data["seconds"])
    raise SystemExit("no delegate_task result recorded")


def main() -> None:
    walls, starts = delegate_runs(3)
    row("3 subagents x 2 s, delegate_task wall (median of 3)", f"{statistics.median(walls):.2f} s", "<= 3 s")
    row("  main before (no delegate_task: sequential would be)", "6.00 s", "-")
    row(
        "child start: answer sent -> child's first request (median)",
        f"{statistics.median(starts) * 1000:.0f} ms",
        "<= 50 ms",
    )
    row("  (slowest of the children)", f"{max(starts) * 1000:.0f} ms", "-")
    here = read_only_wall(sys.executable, REPO)
    row("8 read-only web_fetch calls of 100 ms in one turn (median)", f"{here * 1000:.0f} ms", "<= 300 ms")
    if BASE_PYTHON.exists() and BASE.is_dir():
        before = read_only_wall(str(BASE_PYTHON), BASE)
        row("  main before (one at a time)", f"{before * 1000:.0f} ms", "-")
    else:
        print(f"  main before: {BASE_PYTHON} or {BASE} missing, not measured")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "")
    main()
