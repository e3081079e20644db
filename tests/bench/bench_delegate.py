"""Subagents and parallel read-only calls (issue 19).

1. Three subagents whose model answers take 2 s each, started by one ``delegate_task`` call in
   a real ``runner run-job`` against FakeOpenAI: the tool call's wall time (target <= 3 s).
2. Child start: the parent's ``delegate_task`` answer leaving the model server -> the child's
   first model request arriving there (target <= 50 ms).
3. Eight read-only calls (``web_fetch`` of a local page answering after 100 ms) in one model
   turn through ``run_loop``: the turn's wall time (target <= 300 ms), here and on main before
   (/work/base with /tmp/venv-base), where they run one after another.

Main before has ``delegate_task`` and parallel read-only calls too now: 1 and 2 run on its
``run-job`` as well (its tree and Python), 3 in its ``run_loop``. Floors, the same waiting with
runner out of the way (a local HTTP server answering after the same delay, requests sent at once
from threads): three 2 s requests at once; one request with no delay (a child's start); eight
100 ms requests at once.

Run: python tests/bench/bench_delegate.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _before import Tree, trees
from _common import REPO, beside, clean_env, row

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


def waiting_floor(requests: int, delay: float, rounds: int = 3) -> float:
    """Median seconds for ``requests`` GETs sent at once (threads) to a local server that answers
    each after ``delay`` seconds."""
    import threading
    import time
    import urllib.request
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Slow(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def do_GET(self) -> None:
            time.sleep(delay)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    walls = []
    for _ in range(rounds):
        started = time.perf_counter()
        threads = [threading.Thread(target=lambda: urllib.request.urlopen(url).read()) for _ in range(requests)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        walls.append(time.perf_counter() - started)
    server.shutdown()
    return statistics.median(walls)


def delegate_runs(n: int, tree: Tree) -> tuple[list[float], list[float]]:
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
        env = tree.env(
            HOME=str(root),
            RUNNER_HOME=str(root / "home"),
            RUNNER_JOBS=str(root / "jobs.yaml"),
            OPENAI_BASE_URL=fake.base_url,
            OPENAI_API_KEY="sk-bench-0123456789",
        )
        res = subprocess.run(
            [tree.python, "-m", "runner", "run-job", "boss"],
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    n = parser.parse_args().runs
    both = trees()
    found = {t.name: delegate_runs(n, t) for t in both}
    walls, starts = found["this tree"]
    then = found.get("main before")
    row(f"3 subagents x 2 s, delegate_task wall (median of {n})", f"{statistics.median(walls):.2f} s", "<= 3 s")
    beside("3 subagents x 2 s, delegate_task wall", statistics.median(walls), then and statistics.median(then[0]),
           waiting_floor(3, 2.0, 1), "3 requests answered after 2 s, sent at once", "<= 3 s", "s")
    row(
        "child start: answer sent -> child's first request (median)",
        f"{statistics.median(starts) * 1000:.0f} ms",
        "<= 50 ms",
    )
    row("  (slowest of the children)", f"{max(starts) * 1000:.0f} ms", "-")
    beside("child start, median", statistics.median(starts) * 1000, then and statistics.median(then[1]) * 1000,
           waiting_floor(1, 0.0) * 1000, "one bare request to a local server", "<= 50 ms")
    here = read_only_wall(sys.executable, REPO)
    row("8 read-only web_fetch calls of 100 ms in one turn (median)", f"{here * 1000:.0f} ms", "<= 300 ms")
    before = read_only_wall(both[1].python, both[1].repo) if len(both) > 1 else None
    if before is not None:
        row("  main before", f"{before * 1000:.0f} ms", "-")
    beside("8 read-only calls of 100 ms, one turn", here * 1000, before and before * 1000,
           waiting_floor(8, 0.1) * 1000, "8 requests answered after 100 ms, sent at once", "<= 300 ms")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "")
    main()
