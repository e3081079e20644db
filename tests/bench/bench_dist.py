"""Past one machine (issue 17): the Celery executor and the standby scheduler, as real processes.

- 1,000 one-turn runs (1,000 one-shot jobs due at one instant) onto 3 ``runner worker``s x 8
  concurrency (each its own RUNNER_HOME and project folder), a real redis-server, the fake model
  server: throughput; then fires at ~4/s (below what this machine sustains): fire (the ledger row
  written) -> first model request p50 (target <= 500 ms) and p99. Beside each, the same runs on one
  machine (``executor: local``, max_parallel 24) for this tree and main before (/work/base has no
  Celery executor: its local figure is the one to compare).
- Leader failover: SIGKILL of the leading serve -> the first fire by the standby (target <= lease + 2 s).

Run: python tests/bench/bench_dist.py [--runs 1000] [--failovers 3]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from _common import REPO, clean_env, pct, read, row, wait

sys.path.insert(0, str(REPO))
from runner.clock import iso  # noqa: E402
from runner.testing import FakeOpenAI  # noqa: E402
from runner.testing.fakeopenai import Reply  # noqa: E402
from tests.dist.conftest import Cluster, Redis  # noqa: E402


def jobs_yaml(burst: int, paced: int = 0, every: int = 10) -> str:
    """``burst`` one-shot jobs (``in 2s``: all due at one instant) and ``paced`` jobs every ``every``
    seconds with a jitter of as much (their fires spread evenly: ``paced / every`` per second)."""
    one = '    prompt: "hi {{ run.id }}"\n    toolsets: []\n    overlap: allow\n    catchup: skip\n'
    text = "jobs:\n"
    text += "".join(f"  b{i:04d}:\n    schedule: in 2s\n" + one for i in range(burst))
    text += "".join(f"  p{i:03d}:\n    schedule: every {every}s\n    jitter: {every}s\n" + one for i in range(paced))
    return text


def first_requests(fake: FakeOpenAI) -> dict[str, float]:
    out: dict[str, float] = {}
    for q in list(fake.requests):
        for m in q["body"].get("messages", []):
            content = m.get("content")
            if m.get("role") == "user" and isinstance(content, str) and content.startswith("hi "):
                run_id = content.split()[-1]
                out[run_id] = min(out.get(run_id, q["time"]), q["time"])
    return out


def summarize(label: str, rows: list[tuple], fake: FakeOpenAI) -> None:
    """rows: (id, slot, status, created_at, ended_at) of the fires measured."""
    asked = first_requests(fake)
    lat = [asked[r[0]] - datetime.fromisoformat(r[3]).timestamp() for r in rows if r[0] in asked]
    done = [r for r in rows if r[2] == "succeeded"]
    span = max(datetime.fromisoformat(r[4]).timestamp() for r in done) - min(
        datetime.fromisoformat(r[3]).timestamp() for r in done
    )
    print(f"-- {label}: {len(rows)} fires, {len(done)} succeeded, {runs_twice(fake)} asked the model twice")
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


SQL = "SELECT id, slot, status, created_at, ended_at FROM runs ORDER BY created_at"


class Setup:
    """Where the runs execute: 3 ``runner worker``s x 8 (celery) or serve's own pool (local)."""

    def __init__(self, kind: str, redis: Redis | None = None, repo: Path = REPO, python: str = sys.executable):
        self.kind, self.redis, self.repo, self.python = kind, redis, repo, python

    def run(self, jobs: str, fires: int, label: str, *, stop_after: bool) -> None:
        """Start serve with ``jobs``; once ``fires`` rows exist (stopping serve then if
        ``stop_after``: the paced jobs would fire on) and every one of them ended, print the figures."""
        tmp = Path(tempfile.mkdtemp(prefix=f"bench-{self.kind}-"))
        fake = FakeOpenAI().start()
        fake.default = Reply(content="done")
        try:
            if self.kind == "celery":
                self._celery(tmp, fake, jobs, fires, label, stop_after)
            else:
                self._local(tmp, fake, jobs, fires, label, stop_after)
        finally:
            fake.stop()

    def _celery(self, tmp: Path, fake: FakeOpenAI, jobs: str, fires: int, label: str, stop_after: bool) -> None:
        assert self.redis is not None
        self.redis.flush()
        (tmp / "shared").mkdir()
        db = tmp / "shared" / "runner.db"
        cluster = Cluster(tmp, fake, self.redis.url, f"sqlite://{db}")
        cluster.write_jobs(jobs)
        try:
            workers = [cluster.worker(f"w{i}", concurrency=8, lost_after_s=60) for i in range(3)]
            for w in workers:
                cluster.wait_ready(w, "ready", timeout=60)
            serve = cluster.serve(max_parallel=24, lost_after_s=60)
            self._measure(db, fires, label, fake, stop_after, serve.stop)
        finally:
            cluster.stop()

    def _local(self, tmp: Path, fake: FakeOpenAI, jobs: str, fires: int, label: str, stop_after: bool) -> None:
        (tmp / "proj").mkdir()
        (tmp / "home").mkdir()
        (tmp / "proj" / "jobs.yaml").write_text(jobs)
        (tmp / "home" / "config.yaml").write_text(textwrap.dedent("serve:\n  max_parallel: 24\n"))
        env = clean_env(
            PYTHONPATH=str(self.repo),
            RUNNER_HOME=str(tmp / "home"),
            RUNNER_JOBS=str(tmp / "proj" / "jobs.yaml"),
            OPENAI_BASE_URL=fake.base_url,
            OPENAI_API_KEY="sk-bench-0123456789abcdef",
        )
        with open(tmp / "serve.log", "w") as log:
            proc = subprocess.Popen(
                [self.python, "-m", "runner", "serve"], env=env, cwd=tmp / "proj", stdout=log, stderr=log
            )
            try:
                self._measure(tmp / "home" / "runner.db", fires, label, fake, stop_after, lambda: _term(proc))
            finally:
                _term(proc)

    def _measure(
        self, db: Path, fires: int, label: str, fake: FakeOpenAI, stop_after: bool, stop: Callable[[], None]
    ) -> None:
        wait(lambda: len(read(db, "SELECT id FROM runs")) >= fires, 300, f"{fires} fires ({label})")
        if stop_after:
            stop()
        first = read(db, SQL)[:fires]
        ids = {r[0] for r in first}
        wait(
            lambda: all(r[2] not in ("queued", "running") for r in read(db, SQL) if r[0] in ids),
            300,
            f"the {fires} runs to end ({label})",
        )
        stop()
        summarize(label, [r for r in read(db, SQL) if r[0] in ids], fake)


def _term(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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
    parser.add_argument("--runs", type=int, default=1000, help="one-shot jobs all due at once (throughput)")
    parser.add_argument("--paced", type=int, default=120, help="fires at ~4/s (latency below saturation)")
    parser.add_argument("--failovers", type=int, default=3)
    parser.add_argument("--lease", type=float, default=10.0)
    parser.add_argument("--no-local", action="store_true", help="skip the single-machine figures")
    args = parser.parse_args()
    print("machine shared with other work (2 cores): figures are noisy")
    os.environ["HOME"] = tempfile.mkdtemp(prefix="bench-dist-home-")  # every process gets a throwaway HOME
    redis = Redis().start()
    setups = [("celery, 3 workers x 8", Setup("celery", redis))]
    if not args.no_local:
        setups.append(("local (this tree), max_parallel 24", Setup("local")))
        base = Path(os.environ.get("RUNNER_BENCH_BASE", "/work/base"))
        python = os.environ.get("RUNNER_BENCH_BASE_PYTHON", "/tmp/venv-base/bin/python")
        if (base / "runner").is_dir() and Path(python).exists():
            setups.append(("local (main before), max_parallel 24", Setup("local", repo=base, python=python)))
    try:
        for label, setup in setups:
            setup.run(jobs_yaml(args.runs), args.runs, f"{label}: {args.runs} at once", stop_after=False)
        for label, setup in setups:
            setup.run(jobs_yaml(0, paced=40), args.paced, f"{label}: ~4 fires/s", stop_after=True)
        bench_failover(args.failovers, redis, args.lease)
    finally:
        redis.stop()


if __name__ == "__main__":
    main()
