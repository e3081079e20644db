"""Past one machine (issue 17): the Celery executor and the standby scheduler, as real processes.

- 1,000 one-turn runs (1,000 one-shot jobs due at one instant) onto 3 ``runner worker``s x 8
  concurrency (each its own RUNNER_HOME and project folder), a real redis-server, the fake model
  server: throughput; then fires at ~4/s (below what this machine sustains): fire (the ledger row
  written) -> first model request p50 (target <= 500 ms) and p99. Beside each, the same runs on one
  machine (``executor: local``, max_parallel 24) for this tree and main before (/work/base has no
  Celery executor: its local figure is the one to compare).
- Leader failover: SIGKILL of the leading serve -> the first fire by the standby (target <= lease + 2 s).

main before over Celery too (its serve and workers; its code on this tree's Python when its own
lacks celery, said so), and its failover. Then the headline figures in the common ``beside`` form
with their floors (``_floors.py``), the same work with runner out of the way: over Celery, bare
Celery workers (3 x 8 threads, the options ``runner worker`` passes) on the same Redis, each task
making one openai request to the same fake and writing its row (sent -> row written, after the
request; the throughput of ``--runs`` such tasks); on one machine, a warm Python forking the runs,
24 alive at most, each making one request (an openai client built before the fork) and writing
its row; failover has none (the standby waits for the lease to run out: a setting, not a cost).

Run: python tests/bench/bench_dist.py [--runs 1000] [--failovers 3]
Quick: --runs 60 --paced 12 --failovers 1 --lease 3
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

from _before import Tree, python_with, trees
from _common import REPO, beside, clean_env, pct, read, row, wait
from _floors import CeleryFloor, fork_pool, forked_request

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


def summarize(label: str, rows: list[tuple], fake: FakeOpenAI) -> dict[str, float]:
    """rows: (id, slot, status, created_at, ended_at) of the fires measured; the figures printed."""
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
    return {"rate": len(done) / span, "p50": statistics.median(lat) * 1000, "p99": pct(lat, 99) * 1000}


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

    def run(self, jobs: str, fires: int, label: str, *, stop_after: bool) -> dict[str, float]:
        """Start serve with ``jobs``; once ``fires`` rows exist (stopping serve then if
        ``stop_after``: the paced jobs would fire on) and every one of them ended, print the figures."""
        tmp = Path(tempfile.mkdtemp(prefix=f"bench-{self.kind}-"))
        fake = FakeOpenAI().start()
        fake.default = Reply(content="done")
        try:
            if self.kind == "celery":
                return self._celery(tmp, fake, jobs, fires, label, stop_after)
            return self._local(tmp, fake, jobs, fires, label, stop_after)
        finally:
            fake.stop()

    def _celery(
        self, tmp: Path, fake: FakeOpenAI, jobs: str, fires: int, label: str, stop_after: bool
    ) -> dict[str, float]:
        assert self.redis is not None
        self.redis.flush()
        (tmp / "shared").mkdir()
        db = tmp / "shared" / "runner.db"
        cluster = Cluster(tmp, fake, self.redis.url, f"sqlite://{db}", repo=self.repo, python=self.python)
        cluster.write_jobs(jobs)
        try:
            workers = [cluster.worker(f"w{i}", concurrency=8, lost_after_s=60) for i in range(3)]
            for w in workers:
                cluster.wait_ready(w, "ready", timeout=60)
            serve = cluster.serve(max_parallel=24, lost_after_s=60)
            return self._measure(db, fires, label, fake, stop_after, serve.stop)
        finally:
            cluster.stop()

    def _local(
        self, tmp: Path, fake: FakeOpenAI, jobs: str, fires: int, label: str, stop_after: bool
    ) -> dict[str, float]:
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
                return self._measure(tmp / "home" / "runner.db", fires, label, fake, stop_after, lambda: _term(proc))
            finally:
                _term(proc)

    def _measure(
        self, db: Path, fires: int, label: str, fake: FakeOpenAI, stop_after: bool, stop: Callable[[], None]
    ) -> dict[str, float]:
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
        return summarize(label, [r for r in read(db, SQL) if r[0] in ids], fake)


def _term(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def bench_failover(times: int, redis: Redis, lease_s: float, tree: Tree | None = None) -> float:
    """The median failover, printed; ``tree``: main before's checkout (its label), else this one."""
    repo, python = (tree.repo, python_with(tree, "celery")[0]) if tree else (REPO, sys.executable)
    took: list[float] = []
    for n in range(times):
        tmp = Path(tempfile.mkdtemp(prefix="bench-failover-"))
        fake = FakeOpenAI().start()
        (tmp / "shared").mkdir()
        cluster = Cluster(tmp, fake, redis.url, f"sqlite://{tmp / 'shared' / 'runner.db'}", repo=repo, python=python)
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
    who = f"[{tree.name}] " if tree else ""
    row(
        f"{who}failover: SIGKILL -> first fire by the standby (lease {lease_s:.0f} s), median",
        f"{statistics.median(took):.2f} s",
        f"<= {lease_s + 2:.0f} s",
    )
    row(f"{who}failover: worst", f"{max(took):.2f} s", f"<= {lease_s + 2:.0f} s")
    return statistics.median(took)


def floors(redis: Redis, runs: int, paced: int) -> dict[str, dict[str, float]]:
    """The floors of the headline figures (see the module doc), against a fake of their own."""
    fake = FakeOpenAI().start()
    fake.default = Reply(content="done")
    try:
        redis.flush()
        with CeleryFloor(redis.url, 3, 8) as bare:
            burst = bare.send(runs, "request", fake.base_url)
            single = bare.send(min(paced, 40), "request", fake.base_url, one_at_a_time=True)
        pool = fork_pool(runs, 24, run_true=False, base_url=fake.base_url)
        one = forked_request(min(paced, 40), fake.base_url)
    finally:
        fake.stop()
    return {
        "celery": {"rate": burst.throughput, "p50": pct(single.started, 50), "p99": pct(single.started, 99)},
        "local": {"rate": pool.throughput, "p50": pct(one, 50), "p99": pct(one, 99)},
    }


FLOOR_WHAT = {  # the throughput's floor, then the latency's (one at a time)
    "celery": (
        "bare Celery workers 3 x 8 on the same Redis, each task one openai request and its row",
        "a bare Celery task on the same Redis making one openai request, sent -> answered",
    ),
    "local": (
        "a warm python forking the runs, 24 alive, each one openai request and its row",
        "a warm python forking a child that makes one openai request, fork -> exit",
    ),
}


def show(found: dict[str, dict[str, dict[str, float]]], floor: dict[str, dict[str, float]], runs: int) -> None:
    """found: figures by (kind, "burst" / "paced") and tree name."""
    print("headline figures, beside main before and the floor:")
    for kind in ("celery", "local"):
        burst, paced = found.get(f"{kind} burst", {}), found.get(f"{kind} paced", {})
        if "this tree" not in burst:
            continue
        for label, got, key, target, unit in (
            (f"{runs} at once, throughput", burst, "rate", "", "runs/s"),
            ("~4 fires/s, fire -> first model request p50", paced, "p50", "<= 500 ms", "ms"),
            ("~4 fires/s, fire -> first model request p99", paced, "p99", "", "ms"),
        ):
            here, before = got.get("this tree"), got.get("main before")
            beside(f"  {kind}: {label}", here and here[key], before and before[key], floor[kind][key],
                   FLOOR_WHAT[kind][key != "rate"], target, unit)  # fmt: skip


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
    measured = trees()
    before = measured[1] if len(measured) > 1 else None
    # (label, kind, tree name, setup)
    setups = [("celery, 3 workers x 8", "celery", "this tree", Setup("celery", redis))]
    if before is not None:
        python, note = python_with(before, "celery")
        label = f"celery (main before{f'; {note}' if note else ''}), 3 workers x 8"
        setups.append((label, "celery", "main before", Setup("celery", redis, repo=before.repo, python=python)))
    if not args.no_local:
        setups.append(("local (this tree), max_parallel 24", "local", "this tree", Setup("local")))
        if before is not None:
            local_before = Setup("local", repo=before.repo, python=before.python)
            setups.append(("local (main before), max_parallel 24", "local", "main before", local_before))
    found: dict[str, dict[str, dict[str, float]]] = {}
    try:
        for label, kind, name, setup in setups:
            got = setup.run(jobs_yaml(args.runs), args.runs, f"{label}: {args.runs} at once", stop_after=False)
            found.setdefault(f"{kind} burst", {})[name] = got
        for label, kind, name, setup in setups:
            got = setup.run(jobs_yaml(0, paced=40), args.paced, f"{label}: ~4 fires/s", stop_after=True)
            found.setdefault(f"{kind} paced", {})[name] = got
        failover = bench_failover(args.failovers, redis, args.lease)
        failover_before = bench_failover(args.failovers, redis, args.lease, before) if before else None
        show(found, floors(redis, args.runs, args.paced), args.runs)
        beside(
            f"  failover: SIGKILL -> standby's first fire (lease {args.lease:.0f} s)",
            failover,
            failover_before,
            f"n/a (a setting: the lease must run out, up to {args.lease:.0f} s)",
            "",
            f"<= {args.lease + 2:.0f} s",
            "s",
        )
    finally:
        redis.stop()


if __name__ == "__main__":
    main()
