"""Past one machine (issue 17): the Celery executor and the standby scheduler, as real processes.

- 1,000 one-turn runs fired by serve's schedule (50 jobs every 2 s, jitter 2 s: ~25 fires/s) onto 3 ``runner worker``s x 8
  concurrency (each its own RUNNER_HOME and project folder), a real redis-server, the fake model
  server: throughput, and fire (the ledger row written) -> first model request p50 (target <= 500 ms) and p99;
  beside it the same 1,000 runs on one machine (``executor: local``, max_parallel 24) for this
  tree and main before (/work/base: it has no Celery executor, so the local figure is the one to
  compare).
- Leader failover: SIGKILL of the leading serve -> the first fire by the standby (target <= lease + 2 s).

Run: python tests/bench/bench_dist.py [--runs 1000] [--failovers 3]
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path

from _common import REPO, clean_env, row

sys.path.insert(0, str(REPO))
from runner.clock import iso  # noqa: E402
from runner.testing import FakeOpenAI  # noqa: E402
from runner.testing.fakeopenai import Reply  # noqa: E402
from tests.dist.conftest import Cluster, Redis  # noqa: E402

JOBS = 50
EVERY = 2


def jobs_yaml() -> str:
    return "jobs:\n" + "".join(
        f'  j{i:02d}:\n    schedule: every {EVERY}s\n    jitter: {EVERY}s\n    prompt: "hi {{{{ run.id }}}}"\n    toolsets: []\n'
        "    memory: off\n    overlap: allow\n    catchup: skip\n"
        for i in range(JOBS)
    )


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def first_requests(fake: FakeOpenAI) -> dict[str, float]:
    out: dict[str, float] = {}
    for q in list(fake.requests):
        for m in q["body"].get("messages", []):
            content = m.get("content")
            if m.get("role") == "user" and isinstance(content, str) and content.startswith("hi "):
                run_id = content.split()[-1]
                out[run_id] = min(out.get(run_id, q["time"]), q["time"])
    return out


def read(db: Path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(db, timeout=30)
    try:
        return conn.execute(sql).fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()


def wait(check, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)


def summarize(label: str, db: Path, fake: FakeOpenAI, runs: int) -> None:
    rows = read(db, f"SELECT id, slot, status, created_at, ended_at FROM runs ORDER BY slot LIMIT {runs}")
    asked = first_requests(fake)
    lat = [asked[r[0]] - datetime.fromisoformat(r[3]).timestamp() for r in rows if r[0] in asked]
    done = [r for r in rows if r[2] == "succeeded"]
    span = max(datetime.fromisoformat(r[4]).timestamp() for r in done) - min(
        datetime.fromisoformat(r[3]).timestamp() for r in done
    )
    doubles = runs_twice(fake)
    print(f"-- {label}: {len(rows)} fires, {len(done)} succeeded, {doubles} asked the model twice")
    row(f"{label}: throughput (runs/s)", f"{len(done) / span:.1f}", "-")
    row(f"{label}: fire -> first model request p50", f"{statistics.median(lat) * 1000:.0f} ms", "<= 500 ms")
    row(f"{label}: fire -> first model request p99", f"{pct(lat, 99) * 1000:.0f} ms", "-")


def runs_twice(fake: FakeOpenAI) -> int:
    seen: dict[str, int] = {}
    for q in list(fake.requests):
        for m in q["body"].get("messages", []):
            content = m.get("content")
            if m.get("role") == "user" and isinstance(content, str) and content.startswith("hi "):
                seen[content] = seen.get(content, 0) + 1
    return sum(1 for n in seen.values() if n > 1)


def bench_celery(runs: int, redis: Redis) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-dist-"))
    fake = FakeOpenAI().start()
    fake.default = Reply(content="done")
    (tmp / "shared").mkdir()
    cluster = Cluster(tmp, fake, redis.url, f"sqlite://{tmp / 'shared' / 'runner.db'}")
    cluster.write_jobs(jobs_yaml())
    try:
        workers = [cluster.worker(f"w{i}", concurrency=8, lost_after_s=30) for i in range(3)]
        for w in workers:
            cluster.wait_ready(w, "ready", timeout=60)
        serve = cluster.serve(max_parallel=24, lost_after_s=30)
        db = tmp / "shared" / "runner.db"
        wait(lambda: len(read(db, "SELECT id FROM runs")) >= runs, 120, f"{runs} fires")
        serve.stop()
        wait(
            lambda: not read(db, "SELECT id FROM runs WHERE status IN ('queued','running') AND worker IS NOT NULL"),
            60,
            "the runs",
        )
        summarize("celery, 3 workers x 8", db, fake, runs)
    finally:
        cluster.stop()
        fake.stop()


def bench_local(runs: int, repo: Path, python: str, label: str) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-local-"))
    fake = FakeOpenAI().start()
    fake.default = Reply(content="done")
    (tmp / "proj").mkdir()
    (tmp / "home").mkdir()
    (tmp / "proj" / "jobs.yaml").write_text(jobs_yaml())
    (tmp / "home" / "config.yaml").write_text(textwrap.dedent("serve:\n  max_parallel: 24\n"))
    env = clean_env(
        PYTHONPATH=str(repo),
        RUNNER_HOME=str(tmp / "home"),
        RUNNER_JOBS=str(tmp / "proj" / "jobs.yaml"),
        OPENAI_BASE_URL=fake.base_url,
        OPENAI_API_KEY="sk-bench-0123456789abcdef",
    )
    log = open(tmp / "serve.log", "w")  # noqa: SIM115
    proc = subprocess.Popen([python, "-m", "runner", "serve"], env=env, cwd=tmp / "proj", stdout=log, stderr=log)
    db = tmp / "home" / "runner.db"
    try:
        wait(lambda: len(read(db, "SELECT id FROM runs")) >= runs, 180, f"{runs} fires ({label})")
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
        summarize(label, db, fake, runs)
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
        fake.stop()


def bench_failover(times: int, redis: Redis, lease_s: float) -> None:
    took: list[float] = []
    for n in range(times):
        tmp = Path(tempfile.mkdtemp(prefix="bench-failover-"))
        fake = FakeOpenAI().start()
        (tmp / "shared").mkdir()
        cluster = Cluster(tmp, fake, redis.url, f"sqlite://{tmp / 'shared' / 'runner.db'}")
        cluster.write_jobs(
            "jobs:\n  tick:\n    schedule: every 1s\n    agent: false\n    pre_run: 'true'\n    overlap: allow\n"
        )
        try:
            w = cluster.worker("w0", concurrency=4)
            cluster.wait_ready(w, "ready", timeout=60)
            leader = cluster.serve("a", lease_s=lease_s)
            cluster.wait_ready(leader, "serve started", timeout=60)
            standby = cluster.serve("b", lease_s=lease_s)
            cluster.wait_ready(standby, "standing by", timeout=60)
            time.sleep(1.0 + n * 0.3)  # a different moment of the lease's renewal each time
            killed = time.time()
            os.killpg(leader.proc.pid, signal.SIGKILL)  # type: ignore[union-attr]
            leader.proc.wait()  # type: ignore[union-attr]
            db = tmp / "shared" / "runner.db"
            sql = f"SELECT MIN(created_at) FROM runs WHERE created_at > '{iso(datetime.fromtimestamp(killed, UTC))}'"
            wait(lambda db=db, sql=sql: read(db, sql)[0][0] is not None, lease_s + 30, "the standby's first fire")
            first = datetime.fromisoformat(read(db, sql)[0][0]).timestamp()
            took.append(first - killed)
        finally:
            cluster.stop()
            fake.stop()
    row(
        f"failover: SIGKILL -> first fire by the standby (lease {lease_s:.0f} s), median",
        f"{statistics.median(took):.2f} s",
        f"<= {lease_s + 2:.0f} s",
    )
    row("failover: worst", f"{max(took):.2f} s", f"<= {lease_s + 2:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--failovers", type=int, default=3)
    parser.add_argument("--lease", type=float, default=10.0)
    parser.add_argument("--no-local", action="store_true", help="skip the single-machine figures")
    args = parser.parse_args()
    print("machine shared with other work: figures are noisy")
    os.environ["HOME"] = tempfile.mkdtemp(prefix="bench-dist-home-")  # every process gets a throwaway HOME
    redis = Redis().start()
    try:
        bench_celery(args.runs, redis)
        if not args.no_local:
            bench_local(args.runs, REPO, sys.executable, "local, this tree")
            base = Path(os.environ.get("RUNNER_BENCH_BASE", "/work/base"))
            python = os.environ.get("RUNNER_BENCH_BASE_PYTHON", "/tmp/venv-base/bin/python")
            if (base / "runner").is_dir() and Path(python).exists():
                bench_local(args.runs, base, python, "local, main before")
        bench_failover(args.failovers, redis, args.lease)
    finally:
        redis.stop()


if __name__ == "__main__":
    main()
