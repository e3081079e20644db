"""Alert latency benchmark: ``python tests/bench/bench_alerts.py [JOBS]``.

A real ``runner serve`` with JOBS (default 100) script jobs that fail once each (``in 2s``), and
config.yaml's ``alerts:`` pointing at a local HTTP receiver. For each run: the time from the run's
``ended_at`` in the ledger to its alert arriving at the receiver. Targets: p50 <= 1 s, p99 <= 3 s.

Main before: the same on ``runner serve`` from main before's tree and Python, after this tree's.
Floor: a bare HTTP POST of an alert-sized JSON body to the same receiver (``urllib``, a new
connection each, as a delivery makes), round trip.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import datetime
from pathlib import Path

from _before import Tree, or_reason, trees
from _common import REPO, beside

sys.path.insert(0, str(REPO))

from tests.receivers import Receiver  # noqa: E402

TARGETS = {"p50": 1.0, "p99": 3.0}


def main(count: int) -> None:
    found = {t.name: or_reason(t, lambda t=t: one_tree(t, count)) for t in trees()}
    here, before = found["this tree"], found.get("main before")
    if isinstance(before, str):
        print(f"main before: {before}")
    receiver = Receiver().start()
    body = json.dumps({"run_id": "x" * 26, "job": "j000", "status": "failed", "reason": "exit 1"}).encode()
    floor = []
    for _ in range(count):
        started = time.perf_counter()
        request = urllib.request.Request(f"{receiver.url}/alerts", body, {"Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=10).close()
        floor.append(time.perf_counter() - started)
    receiver.stop()
    for name in ("p50", "p99"):
        then = before[name] * 1000 if isinstance(before, dict) else before and "not measured (see above)"
        beside(f"run ended -> alert received, {name}", here[name] * 1000, then,
               sorted(floor)[int(len(floor) * (0.5 if name == "p50" else 0.99))] * 1000,
               "a bare POST of the alert to the same receiver", f"<= {TARGETS[name]:.0f} s")


def one_tree(tree: Tree, count: int) -> dict[str, float]:
    print(f"== {tree.name}")
    receiver = Receiver().start()
    with tempfile.TemporaryDirectory() as tmp:
        root, home = Path(tmp) / "proj", Path(tmp) / "home"
        root.mkdir()
        home.mkdir()
        (home / "config.yaml").write_text(
            f"serve: {{max_parallel: 8}}\nalerts: ['webhook:{receiver.url}/alerts']\n"
            "delivery: {attempts: 2, backoff: 0.1}\n"
        )
        jobs = "".join(
            f"  j{i:03d}:\n    schedule: in 2s\n    agent: false\n    pre_run: 'exit 1'\n" for i in range(count)
        )
        (root / "jobs.yaml").write_text("jobs:\n" + jobs)
        env = tree.env(RUNNER_HOME=str(home), RUNNER_JOBS=str(root / "jobs.yaml"))
        serve = subprocess.Popen([tree.python, "-m", "runner", "serve"], env=env, cwd=root, stderr=subprocess.DEVNULL)
        try:
            receiver.wait(count, timeout=300)
        finally:
            serve.send_signal(signal.SIGTERM)
            serve.wait(60)
        db = sqlite3.connect(home / "runner.db")
        ended = {
            run_id: datetime.fromisoformat(at).timestamp() for run_id, at in db.execute("SELECT id, ended_at FROM runs")
        }
    receiver.stop()
    lat = sorted(r.wall - ended[r.json()["run_id"]] for r in receiver.requests)
    p50 = statistics.median(lat)
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    print(f"alerts received: {len(lat)} of {count} failed runs")
    for name, value in (("p50", p50), ("p99", p99)):
        verdict = "ok" if value <= TARGETS[name] else "OVER TARGET"
        print(
            f"run ended -> alert received {name}: {value * 1000:8.1f} ms  (target <= {TARGETS[name]:.0f} s) {verdict}"
        )
    print(f"max: {lat[-1] * 1000:.1f} ms")
    return {"p50": p50, "p99": p99}


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100)
