"""Retention benchmarks (issue 16):

1. `runner runs prune` of 100,000 old runs (5 events each, an approval per 100 runs; synthetic
   rows written straight into a migrated store): wall time of the whole command, target <= 10 s;
2. fire lateness of a real `runner serve` firing an every-second script-only job while its
   retention pass prunes those 100,000 runs, against the same serve once the pass is over, and
   against main before's serve (it has retention now) on the same ledger: slot -> ledger row,
   slot -> worker running, and the runs' ``waited_s``.

main before (``$RUNNER_BENCH_BASE``) has `runs prune` and retention now: its command is timed in
the same alternation on a ledger its own code migrated, and its serve prunes the same ledger.
Then the headline figures in the common ``beside`` form with their floors, the same work with
runner out of the way: the prune, a bare ``python -c`` deleting the same runs' rows with
``sqlite3`` (events, approvals, runs; 500 runs a transaction, the Pruner's batch), then
``VACUUM`` and the WAL checkpoint; a fire while pruning, a warm Python forking a child that
writes its row and runs ``true`` (``_floors.py``), nothing pruning.

Run: python tests/bench/bench_prune.py [--runs 100000]; quick: --runs 10000 --reps 1 --seconds 5
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _before import Tree, trees  # noqa: E402
from _common import beside, clean_env  # noqa: E402
from _floors import fork_pool, ledger_rows  # noqa: E402

JOBS = "jobs:\n  tick:\n    schedule: every 1s\n    agent: false\n    pre_run: 'true'\n"


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def make_ledger(path: Path, runs: int, python: str, repo: Path) -> None:
    """A migrated store (by ``repo``'s code) holding ``runs`` finished runs 60-90 days old."""
    subprocess.run(
        [
            python,
            "-c",
            f"from runner.store import Store; Store.open(__import__('pathlib').Path({str(path)!r})).close()",
        ],
        env=clean_env(PYTHONPATH=str(repo)),
        check=True,
    )
    old = datetime.now(UTC) - timedelta(days=60)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("BEGIN")
    db.executemany(
        "INSERT INTO runs (id, job, trigger, status, created_at, started_at, ended_at) VALUES (?, ?, 'schedule', 'succeeded', ?, ?, ?)",
        (
            (f"old-{i:06d}", f"j{i % 100:02d}", t := (old - timedelta(seconds=20 * i)).isoformat(), t, t)
            for i in range(runs)
        ),
    )
    db.executemany(
        "INSERT INTO run_events (run_id, seq, ts, kind, payload) VALUES (?, ?, 'x', 'tool_result', ?)",
        (
            (f"old-{i:06d}", s, '{"name":"terminal","result":"' + "r" * 200 + '"}')
            for i in range(runs)
            for s in range(1, 6)
        ),
    )
    db.executemany(
        "INSERT INTO approvals (run_id, ts, command, level, decision, decided_by) VALUES (?, 'x', 'rm -rf x', 'dangerous', 'denied', 'policy')",
        ((f"old-{i:06d}",) for i in range(0, runs, 100)),
    )
    db.execute("COMMIT")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()


BATCH = 500  # runs per transaction: the Pruner's batch (its most, where it sizes batches by time)

# the floor of `runs prune`: the same rows gone with bare sqlite3 (argv: the db, the batch size)
FLOOR = """
import sqlite3, sys
from datetime import UTC, datetime, timedelta
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA synchronous=NORMAL")
cutoff = (datetime.now(UTC) - timedelta(days=30)).isoformat()
kept, ids = {}, []
for run_id, job in conn.execute("SELECT id, job FROM runs WHERE created_at < ? ORDER BY created_at DESC, id DESC", (cutoff,)):
    kept[job] = kept.get(job, 0) + 1
    if kept[job] > 10:
        ids.append(run_id)
ids.reverse()
batch = int(sys.argv[2])
for at in range(0, len(ids), batch):
    part = ids[at : at + batch]
    marks = ", ".join("?" for _ in part)
    conn.execute("BEGIN IMMEDIATE")
    for table, column in (("run_events", "run_id"), ("approvals", "run_id"), ("runs", "id")):
        conn.execute(f"DELETE FROM {table} WHERE {column} IN ({marks})", part)
    conn.execute("COMMIT")
conn.execute("VACUUM")
conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
print(len(ids))
"""


def bench_prune(runs: int, reps: int) -> None:
    measured = trees()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        masters: dict[str, Path] = {}
        made = 0.0
        for i, tree in enumerate(measured):  # each tree's own migrations
            masters[tree.name] = root / f"master{i}.db"
            started = time.perf_counter()
            make_ledger(masters[tree.name], runs, tree.python, tree.repo)
            made = made or time.perf_counter() - started
        walls: dict[str, list[float]] = {tree.name: [] for tree in measured}
        walls["floor"] = []
        sizes = []
        for rep in range(reps):
            for tree in measured:
                home = root / f"home{rep}-{tree.name.replace(' ', '-')}"
                home.mkdir()
                shutil.copy(masters[tree.name], home / "runner.db")
                before = (home / "runner.db").stat().st_size
                t0 = time.perf_counter()
                out = prune(tree, home, root)
                walls[tree.name].append(time.perf_counter() - t0)
                if tree is measured[0]:
                    sizes.append((before, (home / "runner.db").stat().st_size, out["runs"], out["events"]))
            floor_db = root / f"floor{rep}.db"
            shutil.copy(masters["this tree"], floor_db)
            t0 = time.perf_counter()
            res = subprocess.run(
                [sys.executable, "-c", FLOOR, str(floor_db), str(BATCH)], capture_output=True, text=True
            )
            walls["floor"].append(time.perf_counter() - t0)
            if res.returncode != 0 or int(res.stdout) != sizes[-1][2]:
                raise SystemExit(f"the floor removed other runs than runs prune: {res.stdout} {res.stderr[-800:]}")
    b, a, n, e = sizes[-1]
    here = walls["this tree"]
    print(f"runs prune: {runs:,} old runs, {runs * 5:,} events (ledger written in {made:.1f}s)")
    print(
        f"  removed {n:,} runs and {e:,} events; runner.db {b / 1e6:.0f} MB -> {a / 1e6:.1f} MB; "
        f"wall median {statistics.median(here):.2f}s (runs: {', '.join(f'{w:.2f}' for w in here)})   target <= 10 s"
    )
    then = walls.get("main before")
    beside(
        f"runs prune of {runs:,} runs, wall",
        statistics.median(here),
        then and statistics.median(then),
        statistics.median(walls["floor"]),
        f"python -c: bare sqlite3 DELETEs of the same rows, {BATCH} runs a transaction, VACUUM",
        "<= 10 s",
        "s",
    )


def prune(tree: Tree, home: Path, cwd: Path) -> dict[str, int]:
    """`runner runs prune` by ``tree`` on ``home``'s ledger: its JSON answer."""
    res = subprocess.run(
        [tree.python, "-m", "runner", "runs", "prune", "--older-than", "30d", "--keep-last", "10", "--json"],
        env=tree.env(RUNNER_HOME=str(home)),
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        raise SystemExit(f"{tree.name}: {res.stderr}")
    return dict(json.loads(res.stdout))


class Serve:
    def __init__(self, root: Path, python: str, repo: Path, config: str):
        self.root, self.home = root, root / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        (root / "jobs.yaml").write_text(JOBS)
        (self.home / "config.yaml").write_text(config)
        self.env = clean_env(PYTHONPATH=str(repo), RUNNER_HOME=str(self.home), RUNNER_JOBS=str(root / "jobs.yaml"))
        self.python = python
        self.log = root / "serve.stderr"

    def run(
        self, seconds: float, until: str | None = None, limit: float = 120.0
    ) -> tuple[list[tuple[str, str, str | None, float | None]], str, float]:
        """Serve for ``seconds`` (after ``until`` appeared in its log, when given); returns the
        fires of the every-second job, the log and how long serve ran."""
        with open(self.log, "w") as err:
            proc = subprocess.Popen([self.python, "-m", "runner", "serve"], env=self.env, cwd=self.root, stderr=err)
            t0 = time.time()
            while until is not None and until not in self.log.read_text() and time.time() - t0 < limit:
                time.sleep(0.2)
            time.sleep(seconds)
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
            ran = time.time() - t0
        db = sqlite3.connect(self.home / "runner.db")
        rows = db.execute(
            "SELECT slot, created_at, started_at, waited_s FROM runs WHERE job='tick' AND slot IS NOT NULL ORDER BY slot"
        ).fetchall()
        db.close()
        return rows, self.log.read_text(), ran


def lateness(rows: list[tuple[str, str, str | None, float | None]]) -> tuple[list[float], list[float], list[float]]:
    ledger = [(datetime.fromisoformat(r[1]) - datetime.fromisoformat(r[0])).total_seconds() * 1000 for r in rows]
    running = [
        (datetime.fromisoformat(r[2]) - datetime.fromisoformat(r[0])).total_seconds() * 1000 for r in rows if r[2]
    ]
    waited = [r[3] * 1000 for r in rows if r[3] is not None]
    return ledger, running, waited


def show(label: str, rows: list[tuple[str, str, str | None, float | None]]) -> None:
    ledger, running, waited = lateness(rows)
    print(
        f"  {label:<34} {len(rows):3d} fires  slot->row p50 {pct(ledger, 50):6.1f} p99 {pct(ledger, 99):6.1f} ms"
        f"   slot->running p50 {pct(running, 50):6.1f} p99 {pct(running, 99):6.1f} ms"
        f"   waited_s p50 {pct(waited, 50):5.1f} ms"
    )


def prune_window(log: str) -> datetime | None:
    """When serve logged the end of its retention pass."""
    for line in log.splitlines():
        if "retention: removed" in line:
            parts = line.split()
            return datetime.strptime(f"{parts[0]} {parts[1]}", "%Y-%m-%d %H:%M:%S.%f").astimezone(UTC)
    return None


def bench_lateness(runs: int, seconds: float) -> None:
    config = "serve: {max_parallel: 4, shutdown_grace: 5}\n"
    print(f"serve fire lateness, an every-1s job, {runs:,} old runs in the ledger (machine shared, 2 cores):")
    during_by: dict[str, list[tuple[str, str, str | None, float | None]]] = {}
    for tree in trees():
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            (root / "home").mkdir()
            make_ledger(root / "home" / "runner.db", runs, tree.python, tree.repo)
            extra = "retention: {runs_older_than: 30d, keep_last: 10}\n"
            rows, log, _ = Serve(root, tree.python, tree.repo, config + extra).run(seconds, until="retention: removed")
            end = prune_window(log)
            if end is None:
                print("  (the retention pass did not finish in time; all fires counted as during)")
            during = [r for r in rows if end is None or datetime.fromisoformat(r[0]) <= end]
            after = [r for r in rows if end is not None and datetime.fromisoformat(r[0]) > end]
            first = datetime.fromisoformat(rows[0][0]) if rows else None
            span = f" (pass ended {(end - first).total_seconds():.1f}s after the first fire)" if end and first else ""
            print(f"  {tree.name}{span}:")
            show("while pruning", during)
            show("after the pass", after)
            during_by[tree.name] = during
    floors = {
        "slot -> ledger row": ([ledger_rows(1)[0] for _ in range(20)], "one bare sqlite3 INSERT, nothing pruning"),
        "slot -> worker running": (
            [fork_pool(1, 1).running[0] for _ in range(20)],
            "a warm python forking a child that writes its row and runs true, nothing pruning",
        ),
    }
    for i, (label, (floor, what)) in enumerate(floors.items()):
        here, then = (lateness(during_by[n])[i] if n in during_by else None for n in ("this tree", "main before"))
        here_p99, then_p99 = (pct(v, 99) if v else None for v in (here, then))
        beside(f"  while pruning, {label} p99", here_p99, then_p99, pct(floor, 99), what)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=15.0)
    args = parser.parse_args()
    os.environ.pop("RUNNER_HOME", None)
    bench_prune(args.runs, args.reps)
    bench_lateness(args.runs, args.seconds)


if __name__ == "__main__":
    main()
