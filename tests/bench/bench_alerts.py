"""Alert latency benchmark: ``python tests/bench/bench_alerts.py [JOBS]``.

A real ``runner serve`` with JOBS (default 100) script jobs that fail once each (``in 2s``), and
config.yaml's ``alerts:`` pointing at a local HTTP receiver. For each run: the time from the run's
``ended_at`` in the ledger to its alert arriving at the receiver. Targets: p50 <= 1 s, p99 <= 3 s.
"""

from __future__ import annotations

import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

from _common import REPO, clean_env

sys.path.insert(0, str(REPO))

from tests.receivers import Receiver  # noqa: E402

TARGETS = {"p50": 1.0, "p99": 3.0}


def main(count: int) -> None:
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
        env = clean_env(RUNNER_HOME=str(home), RUNNER_JOBS=str(root / "jobs.yaml"))
        serve = subprocess.Popen(
            [sys.executable, "-m", "runner", "serve"], env=env, cwd=root, stderr=subprocess.DEVNULL
        )
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


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100)
