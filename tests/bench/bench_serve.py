"""Benchmarks for `runner serve` (a real serve subprocess each):

1. fire lateness: 1,000 jobs defined, about 10 firing per second (script-only), slot time to
   the worker process started (its ledger `started_at`): target p50 <= 50 ms, p99 <= 250 ms;
2. fire to first model request for a one-turn agent job against the local fake server:
   target p50 <= 250 ms;
3. serve's resident memory, idle, with 1,000 jobs: target <= 150 MB.

Run: python tests/bench/bench_serve.py [--seconds 30]
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from runner.serve.planner import JobState  # noqa: E402
from runner.serve.state import save_sight  # noqa: E402
from runner.store import Store  # noqa: E402
from runner.testing import FakeOpenAI, final  # noqa: E402


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


class Serve:
    def __init__(self, root: Path, jobs: str, extra_env: dict[str, str] | None = None):
        self.root, self.home = root, root / "home"
        (root / "jobs.yaml").write_text(jobs)
        self.home.mkdir(exist_ok=True)
        (self.home / "config.yaml").write_text("serve: {max_parallel: 4, shutdown_grace: 5}\n")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RUNNER_"))}
        self.env.update(RUNNER_HOME=str(self.home), RUNNER_JOBS=str(root / "jobs.yaml"), PYTHONPATH=str(REPO))
        self.env.update(extra_env or {})
        self.log = root / "serve.stderr"

    def start(self) -> Serve:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runner", "serve"],
            env=self.env,
            cwd=self.root,
            stdout=subprocess.DEVNULL,
            stderr=open(self.log, "w"),  # noqa: SIM115
        )
        return self

    def wait_ready(self, timeout: float = 60) -> float:
        """Seconds until serve's heartbeat row exists."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if self.query("SELECT 1 FROM serve_instance WHERE pid=?", (self.proc.pid,)):
                return time.monotonic() - start
            if self.proc.poll() is not None:
                raise SystemExit(f"serve exited: {self.log.read_text()}")
            time.sleep(0.05)
        raise SystemExit("serve did not start")

    def query(self, sql: str, params: tuple = ()) -> list[tuple]:
        db_path = self.home / "runner.db"
        if not db_path.exists():
            return []
        db = sqlite3.connect(db_path, timeout=30)
        try:
            return db.execute(sql, params).fetchall()
        except sqlite3.OperationalError:
            return []
        finally:
            db.close()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)


def ts(text: str) -> datetime:
    return datetime.fromisoformat(text)


def spawn_times(log: str) -> dict[str, datetime]:
    """Run id -> when serve had the worker's pid (from "started JOB run ID (pid N, ...)" lines)."""
    out = {}
    for line in log.splitlines():
        parts = line.split()
        if len(parts) > 5 and parts[2] == "INFO" and parts[3] == "started" and parts[5] == "run":
            stamp = datetime.strptime(f"{parts[0]} {parts[1]}", "%Y-%m-%d %H:%M:%S.%f").astimezone(UTC)
            out[parts[6]] = stamp
    return out


def bench_lateness(seconds: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        jobs = "jobs:\n" + "".join(
            f"  j{i:04d}:\n    schedule: every 100s\n    agent: false\n    pre_run: 'true'\n" for i in range(1000)
        )
        serve = Serve(root, jobs)
        # every job fires every 100 s; their grids are staggered 0.1 s apart -> 10 fires per second
        t0 = (datetime.now(UTC) + timedelta(seconds=15)).replace(microsecond=0)
        store = Store.open(serve.home / "runner.db")
        for i in range(1000):
            slot = t0 + timedelta(seconds=i * 0.1)
            save_sight(
                store,
                JobState(
                    f"j{i:04d}",
                    "every 100s",
                    first_seen=t0 - timedelta(days=1),
                    last_slot=slot - timedelta(seconds=100),
                    resolved_at=slot,
                ),
            )
        store.close()
        serve.start()
        ready = serve.wait_ready()
        end = t0 + timedelta(seconds=seconds)
        time.sleep(max(0.0, (end - datetime.now(UTC)).total_seconds()) + 1.0)
        serve.stop()
        rows = serve.query(
            "SELECT slot, created_at, started_at, status, id FROM runs WHERE slot <= ? ORDER BY slot",
            (end.isoformat(),),
        )
        spawned = spawn_times(serve.log.read_text())
    started = [r for r in rows if r[2]]
    fire_ms = [(ts(r[1]) - ts(r[0])).total_seconds() * 1000 for r in rows]
    spawn_ms = [(spawned[r[4]] - ts(r[0])).total_seconds() * 1000 for r in rows if r[4] in spawned]
    start_ms = [(ts(r[2]) - ts(r[0])).total_seconds() * 1000 for r in started]
    statuses = {s: sum(1 for r in rows if r[3] == s) for s in {r[3] for r in rows}}
    print(
        f"fire lateness, 1000 jobs, ~10 fires/s for {seconds:.0f}s (serve ready in {ready:.1f}s): {len(rows)} fires {statuses}"
    )
    print(f"  slot -> ledger row      p50 {pct(fire_ms, 50):6.1f} ms   p99 {pct(fire_ms, 99):6.1f} ms")
    print(
        f"  slot -> process forked  p50 {pct(spawn_ms, 50):6.1f} ms   p99 {pct(spawn_ms, 99):6.1f} ms   (serve's log)"
    )
    print(
        f"  slot -> worker running  p50 {pct(start_ms, 50):6.1f} ms   p99 {pct(start_ms, 99):6.1f} ms   (targets: p50 <= 50 ms, p99 <= 250 ms)"
    )


def bench_first_request(fires: int) -> None:
    fake = FakeOpenAI().start()
    fake.default = final("ok")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            jobs = "jobs:\n  talk:\n    schedule: every 1s\n    prompt: say ok\n    toolsets: [terminal, files]\n    deliver: [file]\n"
            serve = Serve(root, jobs, {"OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-bench-0123456789abcdef"})
            serve.start()
            serve.wait_ready()
            deadline = time.monotonic() + fires + 20
            while len(fake.requests) < fires and time.monotonic() < deadline:
                time.sleep(0.1)
            serve.stop()
            rows = serve.query(
                "SELECT slot, started_at FROM runs WHERE job='talk' AND started_at IS NOT NULL ORDER BY slot"
            )
    finally:
        fake.stop()
    request_times = sorted(r["time"] for r in fake.requests)
    lat = []
    for slot_text, _ in rows:
        slot = ts(slot_text).timestamp()
        after = [t for t in request_times if t >= slot]
        if after and after[0] - slot < 1.0:
            lat.append((after[0] - slot) * 1000)
    print(f"fire -> first model request, one-turn job, {len(lat)} fires:")
    print(f"  p50 {pct(lat, 50):6.1f} ms   p99 {pct(lat, 99):6.1f} ms   (target: p50 <= 250 ms)")


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


def bench_idle_rss() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        jobs = "jobs:\n" + "".join(
            f"  j{i:04d}:\n    schedule: '{i % 60} {i % 24} * * *'\n    agent: false\n    pre_run: 'true'\n"
            for i in range(1000)
        )
        serve = Serve(root, jobs).start()
        ready = serve.wait_ready()
        time.sleep(5)
        own = rss_kb(serve.proc.pid)
        helpers = sum(rss_kb(c) for c in children(serve.proc.pid))
        serve.stop()
    print(f"idle with 1000 jobs (ready in {ready:.1f}s):")
    print(f"  serve RSS {own / 1024:6.1f} MB   (target <= 150 MB); its forkserver {helpers / 1024:.1f} MB more")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30.0, help="length of the lateness run")
    parser.add_argument("--fires", type=int, default=15, help="fires measured for the model benchmark")
    args = parser.parse_args()
    bench_lateness(args.seconds)
    bench_first_request(args.fires)
    bench_idle_rss()


if __name__ == "__main__":
    main()
