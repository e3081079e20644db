"""Burst benchmark for `runner serve`: many script-only jobs whose slots fall on the same instant
(what ``0 2 * * *`` on 200 jobs does), run against this tree and against main before (/work/base).

Each scenario is a real serve subprocess; the jobs' stored state is seeded so every slot is the
same instant a few seconds ahead (no waiting for a minute boundary). Printed per scenario:

- slot -> ledger row (``created_at``, the insert time; main before wrote the tick's clock reading);
- slot -> worker running (the worker's ``started_at``);
- start overhead: the worker has its run -> worker running (``dispatched_at``, the forked worker's
  first moment; main before: serve's "started ... (pid N)" log line, written once the fork returned);
- throughput: runs finished per second from the slot to the last ``ended_at``;
- rows missed or doubled.

Targets: 200 fires, max_parallel 50: slot -> running p99 <= 1.0 s, start overhead p50 <= 15 ms;
max_parallel 4: >= 150 runs/s; 1,000 fires: ledger rows p99 <= 300 ms after the slot, none
missed or doubled.

Then each scenario's headline figures in the common ``beside`` form: this tree, main before (its
serve, measured in the same run) and the floor, the same work from a warm Python with runner out
of the way (``_floors.py``): slot -> running and throughput, the Python forking the N children,
at most max_parallel alive, each writing its row with bare ``sqlite3``, running ``true`` and
writing its end; start overhead, such a child's first moment -> its row written; slot -> ledger
row, bare ``sqlite3`` inserting the N rows, a transaction each.

Run: python tests/bench/bench_burst.py [--base /work/base --base-python /tmp/venv-base/bin/python]
Quick: --scenarios 50x50,50x4
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
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from _common import beside, pct
from _floors import fork_pool, ledger_rows

REPO = Path(__file__).resolve().parents[2]

SEED = """
import sys
from datetime import datetime, timedelta
from runner.serve.planner import JobState
from runner.serve.state import save_sight
from runner.store import Store
home, t0, n = sys.argv[1], datetime.fromisoformat(sys.argv[2]), int(sys.argv[3])
store = Store.open(home + "/runner.db")
for i in range(n):
    save_sight(store, JobState(f"j{i:04d}", "every 3600s", first_seen=t0 - timedelta(days=1),
               last_slot=t0 - timedelta(seconds=3600), resolved_at=t0))
store.close()
"""


@dataclass(frozen=True)
class Tree:
    label: str
    repo: Path
    python: str


@dataclass(frozen=True)
class Figures:
    rows: int
    statuses: dict[str, int]
    doubled: int
    ledger: list[float]
    running: list[float]
    overhead: list[float]
    throughput: float
    cpu_serve_ms: float  # serve's own CPU per run
    cpu_workers_ms: float  # the workers' (and their commands') CPU per run, reaped by the forkserver


def ts(text: str) -> datetime:
    return datetime.fromisoformat(text)


def dispatch_times(log: str) -> dict[str, datetime]:
    """Run id -> serve's "started JOB run ID (pid N ...)" log time."""
    out = {}
    for line in log.splitlines():
        parts = line.split()
        if len(parts) > 6 and parts[2] == "INFO" and parts[3] == "started" and parts[5] == "run":
            stamp = datetime.strptime(f"{parts[0]} {parts[1]}", "%Y-%m-%d %H:%M:%S.%f").astimezone(UTC)
            out[parts[6]] = stamp
    return out


def scenario(tree: Tree, jobs: int, max_parallel: int, lead: float = 6.0) -> Figures:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        home = root / "home"
        home.mkdir()
        (home / "config.yaml").write_text(f"serve: {{max_parallel: {max_parallel}, shutdown_grace: 5}}\n")
        text = "jobs:\n" + "".join(
            f"  j{i:04d}:\n    schedule: every 3600s\n    agent: false\n    pre_run: 'true'\n" for i in range(jobs)
        )
        (root / "jobs.yaml").write_text(text)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RUNNER_", "PYTHON"))}
        env.update(RUNNER_HOME=str(home), RUNNER_JOBS=str(root / "jobs.yaml"), PYTHONPATH=str(tree.repo))
        t0 = (datetime.now(UTC) + timedelta(seconds=lead)).replace(microsecond=0)
        subprocess.run([tree.python, "-c", SEED, str(home), t0.isoformat(), str(jobs)], env=env, check=True)
        log = root / "serve.stderr"
        with open(log, "w") as err:
            proc = subprocess.Popen(
                [tree.python, "-m", "runner", "serve"], env=env, cwd=root, stdout=subprocess.DEVNULL, stderr=err
            )
            try:
                _wait_done(home / "runner.db", jobs, t0 + timedelta(seconds=60), proc)
                cpu = _cpu(proc.pid)
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=60)
        return _figures(home / "runner.db", t0, log.read_text(), (cpu[0] / jobs, cpu[1] / jobs))


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _cpu(pid: int) -> tuple[float, float]:
    """(serve's CPU ms, the workers' CPU ms): the forkserver (serve's child) has reaped the workers
    that exited; reusable workers still alive count their own time and their reaped commands'."""
    tick = 1000.0 / os.sysconf("SC_CLK_TCK")
    own = _stat(pid)
    serve_ms = (int(own[11]) + int(own[12])) * tick
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                table[int(entry)] = _stat(int(entry))
            except OSError:
                continue
    forkservers = {p for p, fields in table.items() if int(fields[1]) == pid}
    workers_ms = 0.0
    for p, fields in table.items():
        if p in forkservers:
            workers_ms += (int(fields[13]) + int(fields[14])) * tick
        elif int(fields[1]) in forkservers:
            workers_ms += sum(int(fields[i]) for i in (11, 12, 13, 14)) * tick
    return serve_ms, workers_ms


def _query(db_path: Path, sql: str) -> list[sqlite3.Row]:
    db = sqlite3.connect(db_path, timeout=30)
    db.row_factory = sqlite3.Row
    try:
        return db.execute(sql).fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        db.close()


def _wait_done(db_path: Path, jobs: int, until: datetime, proc: subprocess.Popen[bytes]) -> None:
    while datetime.now(UTC) < until:
        if proc.poll() is not None:
            raise SystemExit("serve exited early")
        done = _query(db_path, "SELECT COUNT(*) AS n FROM runs WHERE ended_at IS NOT NULL")
        if done and done[0]["n"] >= jobs:
            return
        time.sleep(0.2)


def _figures(db_path: Path, t0: datetime, log: str, cpu: tuple[float, float]) -> Figures:
    rows = _query(db_path, "SELECT * FROM runs")
    cols = rows[0].keys() if rows else []
    logged = dispatch_times(log)
    statuses: dict[str, int] = {}
    for r in rows:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    per_job: dict[str, int] = {}
    for r in rows:
        per_job[r["job"]] = per_job.get(r["job"], 0) + 1
    ms = 1000.0
    ledger = [(ts(r["created_at"]) - t0).total_seconds() * ms for r in rows]
    running = [(ts(r["started_at"]) - t0).total_seconds() * ms for r in rows if r["started_at"]]
    overhead = []
    for r in rows:
        handed = r["dispatched_at"] if "dispatched_at" in cols else None
        start = ts(handed) if handed else logged.get(r["id"])
        if start is not None and r["started_at"]:
            overhead.append((ts(r["started_at"]) - start).total_seconds() * ms)
    ends = [ts(r["ended_at"]) for r in rows if r["ended_at"]]
    span = (max(ends) - t0).total_seconds() if ends else float("inf")
    doubled = sum(n - 1 for n in per_job.values())
    return Figures(len(rows), statuses, doubled, ledger, running, overhead, len(ends) / span, *cpu)


def show(name: str, figures: dict[str, Figures]) -> None:
    print(name)
    for label, f in figures.items():
        print(f"  [{label}] {f.rows} rows {f.statuses}, doubled {f.doubled}")
        for what, values in (
            ("slot -> ledger row", f.ledger),
            ("slot -> worker running", f.running),
            ("start overhead", f.overhead),
        ):
            print(f"    {what:<24} p50 {pct(values, 50):8.1f} ms   p99 {pct(values, 99):8.1f} ms")
        print(f"    {'throughput':<24} {f.throughput:8.1f} runs/s")
        print(f"    {'CPU per run':<24} serve {f.cpu_serve_ms:5.1f} ms   workers {f.cpu_workers_ms:5.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", default="/work/base", help="main before the change ('' to skip)")
    parser.add_argument("--base-python", default="/tmp/venv-base/bin/python")
    parser.add_argument("--scenarios", default="200x50,200x4,1000x50", help="JOBSxMAX_PARALLEL, comma-separated")
    args = parser.parse_args()
    trees = [Tree("this", REPO, sys.executable)]
    if args.base and Path(args.base).is_dir():
        trees.append(Tree("main before", Path(args.base), args.base_python))
    targets = {
        "200x50": "targets: running p99 <= 1000 ms, start overhead p50 <= 15 ms",
        "200x4": "target: >= 150 runs/s",
        "1000x50": "target: ledger row p99 <= 300 ms, none missed or doubled",
    }
    for name in args.scenarios.split(","):
        jobs, parallel = (int(x) for x in name.split("x"))
        target = targets.get(name, "")
        figures = {t.label: scenario(t, jobs, parallel) for t in trees}
        show(f"{jobs} fires at the same instant, max_parallel {parallel} ({target})", figures)
        show_beside(jobs, parallel, figures)


def show_beside(jobs: int, parallel: int, figures: dict[str, Figures]) -> None:
    """The headline figures beside main before and the floor (see the module doc)."""
    pool, rows = fork_pool(jobs, parallel), ledger_rows(jobs)
    this, before = figures["this"], figures.get("main before")
    at = f"{jobs}x{parallel}"
    forks = f"{jobs} forks of a warm python, {parallel} alive, each writing its row and running true"
    for label, get, floor, what, target, unit in (
        ("slot -> worker running p99", lambda f: pct(f.running, 99), pct(pool.running, 99), forks,
         "<= 1000 ms" if at == "200x50" else "", "ms"),
        ("start overhead p50", lambda f: pct(f.overhead, 50), pct(pool.overhead, 50),
         "a forked child's first moment -> its row written", "<= 15 ms" if at == "200x50" else "", "ms"),
        ("throughput", lambda f: f.throughput, pool.throughput, forks, ">= 150 runs/s" if at == "200x4" else "",
         "runs/s"),
        ("slot -> ledger row p99", lambda f: pct(f.ledger, 99), pct(rows, 99),
         f"bare sqlite3, {jobs} rows a transaction each", "<= 300 ms" if at == "1000x50" else "", "ms"),
    ):  # fmt: skip
        beside(f"  {at}: {label}", get(this), before and get(before), floor, what, target, unit)


if __name__ == "__main__":
    main()
