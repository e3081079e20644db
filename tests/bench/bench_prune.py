"""Retention benchmarks (issue 16):

1. `runner runs prune` of 100,000 old runs (5 events each, an approval per 100 runs; synthetic
   rows written straight into a migrated store): wall time of the whole command, target <= 10 s;
2. fire lateness of a real `runner serve` firing an every-second script-only job while its
   retention pass prunes those 100,000 runs, against the same serve once the pass is over, and
   against main before's serve (no retention) on the same ledger: slot -> ledger row,
   slot -> worker running, and the runs' ``waited_s``.

main before had no `runs prune`. Run: python tests/bench/bench_prune.py [--runs 100000]
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
from _before import trees  # noqa: E402
from _common import REPO, clean_env  # noqa: E402

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


def bench_prune(runs: int, reps: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        master = root / "master.db"
        started = time.perf_counter()
        make_ledger(master, runs, sys.executable, REPO)
        made = time.perf_counter() - started
        walls, sizes = [], []
        for rep in range(reps):
            home = root / f"home{rep}"
            home.mkdir()
            shutil.copy(master, home / "runner.db")
            before = (home / "runner.db").stat().st_size
            env = clean_env(RUNNER_HOME=str(home))
            t0 = time.perf_counter()
            res = subprocess.run(
                [sys.executable, "-m", "runner", "runs", "prune", "--older-than", "30d", "--keep-last", "10", "--json"],
                env=env,
                cwd=root,
                capture_output=True,
                text=True,
            )
            walls.append(time.perf_counter() - t0)
            if res.returncode != 0:
                raise SystemExit(res.stderr)
            out = json.loads(res.stdout)
            sizes.append((before, (home / "runner.db").stat().st_size, out["runs"], out["events"]))
    b, a, n, e = sizes[-1]
    print(f"runs prune: {runs:,} old runs, {runs * 5:,} events (ledger written in {made:.1f}s)")
    print(
        f"  removed {n:,} runs and {e:,} events; runner.db {b / 1e6:.0f} MB -> {a / 1e6:.1f} MB; "
        f"wall median {statistics.median(walls):.2f}s (runs: {', '.join(f'{w:.2f}' for w in walls)})   target <= 10 s"
    )
    print("  main before: no `runner runs prune` (n/a)")


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
    ran = seconds * 2
    for tree in trees():
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            (root / "home").mkdir()
            make_ledger(root / "home" / "runner.db", runs, tree.python, tree.repo)
            here = tree.name == "this tree"
            if not here:  # as long as this tree's serve ran, on the same ledger, without retention
                rows, _, _ = Serve(root, tree.python, tree.repo, config).run(ran)
                show("main before (no retention)", rows)
                continue
            extra = "retention: {runs_older_than: 30d, keep_last: 10}\n"
            rows, log, ran = Serve(root, tree.python, tree.repo, config + extra).run(
                seconds, until="retention: removed"
            )
            end = prune_window(log)
            if end is None:
                print("  (the retention pass did not finish in time; all fires counted as during)")
            during = [r for r in rows if end is None or datetime.fromisoformat(r[0]) <= end]
            after = [r for r in rows if end is not None and datetime.fromisoformat(r[0]) > end]
            first = datetime.fromisoformat(rows[0][0]) if rows else None
            span = f" (pass ended {(end - first).total_seconds():.1f}s after the first fire)" if end and first else ""
            print(f"  this tree{span}:")
            show("while pruning", during)
            show("after the pass", after)


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
