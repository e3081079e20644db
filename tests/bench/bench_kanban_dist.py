"""Kanban attempts over Celery (issue 17), as real processes: the dispatcher inside ``runner serve``
claims tasks in the shared store and sends each attempt to a ``runner worker`` through a real
redis-server; beside it, the same board with ``executor: local`` (serve forks the attempts itself).

Script-only tasks (``agent: false``, ``pre_run: 'true'``): what is measured is the dispatch path,
not a model. Printed per setup:

- a batch of ``--tasks`` added at once: tasks done per second (first add -> last completion),
  add -> taken p50 / p99, and attempts that ran twice (``taken`` events per (task, fence): 0);
- one task at a time (``--samples``): add -> taken and add -> completed, p50.

Each setup runs for this tree and for main before (``$RUNNER_BENCH_BASE``, its serve and workers;
when its Python lacks celery, its code on this tree's Python, said so). Then the headline figures
in the common ``beside`` form with their floors (``_floors.py``), the same work with runner out of
the way: over Celery, a bare Celery worker pair (threads pool, 2 x 4, the options ``runner worker``
passes) on the same Redis, each task writing its row with bare ``sqlite3`` and running ``true``
(sent -> row written, sent -> end); local, a warm Python forking the attempts, 8 alive at most,
each writing its row and running ``true``.

Run: python tests/bench/bench_kanban_dist.py [--tasks 200] [--samples 10]; quick: --tasks 40 --samples 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

from _before import Tree, python_with, trees
from _common import REPO, beside, pct, read, row, wait
from _floors import CeleryFloor, fork_pool

sys.path.insert(0, str(REPO))
from runner.testing import FakeOpenAI  # noqa: E402
from tests.dist.conftest import Cluster, Redis  # noqa: E402

JOBS = "jobs:\n  chore:\n    agent: false\n    pre_run: 'true'\n"
KANBAN = "kanban:\n  max_workers: {slots}\n  lease_seconds: 60\n  retry_backoff: 0\n  poll_seconds: 1\n"
SLOTS = 8  # attempts in flight: celery 2 workers x 4, local max_workers 8


def ts(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


# run by the tree measured (its Board on its store): prints the new tasks' ids
ADD = """
import json, sys
from runner.clock import utcnow
from runner.store import Store
from runner.store.board import Board
store = Store.open(sys.argv[1], migrate=False)
board = Board(store)
print(json.dumps([board.add(f"{sys.argv[3]} {i}", now=utcnow(), job="chore") for i in range(int(sys.argv[2]))]))
store.close()
"""


def add(db: Path, n: int, tag: str, tree: Tree) -> list[int]:
    proc = subprocess.run(
        [tree.python, "-c", ADD, str(db), str(n), tag], env=tree.env(), capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"{tree.name}: adding tasks failed: {proc.stderr[-800:]}")
    return list(json.loads(proc.stdout.splitlines()[-1]))


def done(db: Path, ids: list[int]) -> bool:
    marks = ",".join(map(str, ids))
    return read(db, f"SELECT COUNT(*) FROM tasks WHERE id IN ({marks}) AND status='done'")[0][0] == len(ids)


def times(db: Path, ids: list[int]) -> dict[int, dict[str, float]]:
    marks = ",".join(map(str, ids))
    out: dict[int, dict[str, float]] = {i: {} for i in ids}
    for task_id, created in read(db, f"SELECT id, created_at FROM tasks WHERE id IN ({marks})"):
        out[task_id]["created"] = ts(created)
    for task_id, kind, stamp in read(
        db, f"SELECT task_id, kind, ts FROM task_events WHERE task_id IN ({marks}) ORDER BY id"
    ):
        out[task_id].setdefault(kind, ts(stamp))
    return out


def twice(db: Path, ids: list[int]) -> int:
    marks = ",".join(map(str, ids))
    taken = Counter(read(db, f"SELECT task_id, fence FROM task_events WHERE kind='taken' AND task_id IN ({marks})"))
    claimed = Counter(read(db, f"SELECT task_id, fence FROM task_events WHERE kind='claimed' AND task_id IN ({marks})"))
    return sum(n - 1 for n in taken.values() if n > 1) + sum(n - 1 for n in claimed.values() if n > 1)


def measure(label: str, db: Path, tasks: int, samples: int, tree: Tree) -> dict[str, float]:
    """The printed figures, returned for the ``beside`` lines: rate, taken p99, single taken / done p50."""
    time.sleep(3.0)  # serve settles: forkserver warm, first ticks done
    ids = add(db, tasks, "batch", tree)
    wait(lambda: done(db, ids), 600, f"{tasks} tasks done ({label})", interval=0.02)
    got = times(db, ids)
    first = min(t["created"] for t in got.values())
    span = max(t["completed"] for t in got.values()) - first
    took = [(t.get("taken", t.get("spawned", t["claimed"])) - t["created"]) * 1000 for t in got.values()]
    row(f"{label}: {tasks} at once, tasks done per second", f"{tasks / span:.1f} /s", "-")
    row(f"{label}: {tasks} at once, add -> taken p50 / p99", f"{pct(took, 50):.0f} / {pct(took, 99):.0f} ms", "-")
    row(f"{label}: attempts run twice", str(twice(db, ids)), "0")
    single_taken, single_done = [], []
    for i in range(samples):
        [one] = add(db, 1, f"single {i}", tree)
        wait(lambda one=one: done(db, [one]), 60, f"task {one} ({label})", interval=0.02)
        t = times(db, [one])[one]
        single_taken.append((t.get("taken", t.get("spawned", t["claimed"])) - t["created"]) * 1000)
        single_done.append((t["completed"] - t["created"]) * 1000)
    row(f"{label}: one at a time, add -> taken p50", f"{statistics.median(single_taken):.0f} ms", "-")
    row(f"{label}: one at a time, add -> completed p50", f"{statistics.median(single_done):.0f} ms", "-")
    return {
        "rate": tasks / span,
        "taken": pct(took, 99),
        "single_taken": statistics.median(single_taken),
        "single_done": statistics.median(single_done),
    }


def celery(redis: Redis, tasks: int, samples: int, tree: Tree) -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-kanban-celery-"))
    fake = FakeOpenAI().start()
    (tmp / "shared").mkdir()
    db = tmp / "shared" / "runner.db"
    python, note = python_with(tree, "celery")
    cluster = Cluster(tmp, fake, redis.url, f"sqlite://{db}", repo=tree.repo, python=python)
    cluster.write_jobs(JOBS)
    try:
        workers = [cluster.worker(f"w{i}", concurrency=SLOTS // 2, lost_after_s=60) for i in range(2)]
        for w in workers:
            cluster.wait_ready(w, "ready", timeout=60)
        serve = cluster.serve(extra=KANBAN.format(slots=SLOTS), lost_after_s=60)
        cluster.wait_ready(serve, "kanban: attempts go to runner worker processes", timeout=60)
        named = f"{tree.name} ({note})" if note else tree.name
        return measure(f"[{named}] celery, 2 workers x {SLOTS // 2}", db, tasks, samples, tree)
    finally:
        cluster.stop()
        fake.stop()


def local(tasks: int, samples: int, tree: Tree) -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-kanban-local-"))
    (tmp / "proj").mkdir()
    (tmp / "home").mkdir()
    (tmp / "proj" / "jobs.yaml").write_text(JOBS)
    (tmp / "home" / "config.yaml").write_text(textwrap.dedent(KANBAN.format(slots=SLOTS)))
    env = tree.env(RUNNER_HOME=str(tmp / "home"), RUNNER_JOBS=str(tmp / "proj" / "jobs.yaml"))
    db = tmp / "home" / "runner.db"
    with open(tmp / "serve.log", "w") as log:
        proc = subprocess.Popen(
            [tree.python, "-m", "runner", "serve"], env=env, cwd=tmp / "proj", stdout=log, stderr=log
        )
        try:
            wait(lambda: bool(read(db, "SELECT 1 FROM sqlite_master WHERE name='tasks'")), 60, "serve's store")
            return measure(f"[{tree.name}] local, max_workers {SLOTS}", db, tasks, samples, tree)
        finally:
            proc.terminate()
            proc.wait(120)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--samples", type=int, default=10)
    args = parser.parse_args()
    print("machine shared with other work (2 cores): figures are noisy")
    os.environ["HOME"] = tempfile.mkdtemp(prefix="bench-kanban-dist-home-")  # a throwaway HOME for every process
    redis = Redis().start()
    try:
        measured = trees()
        over_celery = {tree.name: celery(redis, args.tasks, args.samples, tree) for tree in measured}
        if len(measured) > 1 and (note := python_with(measured[1], "celery")[1]):
            print(f"(main before over celery: {note})")
        with CeleryFloor(redis.url, 2, SLOTS // 2) as bare:
            batch = bare.send(args.tasks, "true")
            single = [bare.send(1, "true") for _ in range(args.samples)]
        show(f"celery, 2 workers x {SLOTS // 2}", args.tasks, over_celery, {
            "rate": batch.throughput,
            "taken": pct(batch.started, 99),
            "single_taken": statistics.median(s.started[0] for s in single),
            "single_done": statistics.median(s.ended[0] for s in single),
        }, "a bare Celery worker pair (threads 2 x 4) on the same Redis, each task writing its row, running true")  # fmt: skip
        forked = {tree.name: local(args.tasks, args.samples, tree) for tree in measured}
        pool = fork_pool(args.tasks, SLOTS)
        singles = [fork_pool(1, 1) for _ in range(args.samples)]
        show(f"local, max_workers {SLOTS}", args.tasks, forked, {
            "rate": pool.throughput,
            "taken": pct(pool.running, 99),
            "single_taken": statistics.median(s.running[0] for s in singles),
            "single_done": statistics.median(s.ended[0] for s in singles),
        }, f"a warm python forking the attempts, {SLOTS} alive, each writing its row, running true")  # fmt: skip
    finally:
        redis.stop()


def show(setup: str, tasks: int, by_tree: dict[str, dict[str, float]], floor: dict[str, float], what: str) -> None:
    """The headline figures of one setup beside main before and the floor."""
    before = by_tree.get("main before")
    for key, label, unit in (
        ("rate", f"{tasks} at once, tasks done per second", "/s"),
        ("taken", f"{tasks} at once, add -> taken p99", "ms"),
        ("single_taken", "one at a time, add -> taken p50", "ms"),
        ("single_done", "one at a time, add -> completed p50", "ms"),
    ):
        beside(f"{setup}: {label}", by_tree["this tree"][key], before and before[key], floor[key], what, "", unit)


if __name__ == "__main__":
    main()
