"""Benchmarks for `runner serve` (a real serve subprocess each), this tree beside main before
(``$RUNNER_BENCH_BASE``, default /work/base, run by ``$RUNNER_BENCH_BASE_PYTHON``; tests/bench/_before.py):

1. fire lateness with 1,000 and with 10,000 jobs defined, about 10 firing per second (script-only):
   slot time to the worker process started (its ledger `started_at`): target p50 <= 50 ms,
   p99 <= 250 ms;
2. fire to first model request for a one-turn agent job against the local fake server (this
   tree): target p50 <= 250 ms;
3. a lean daemon (issue 36), with 1,000 and with 10,000 jobs none of which is due for hours: the
   memory of serve and every process under it, idle (RSS summed, the target's figure, and PSS from
   /proc/PID/smaps_rollup, which shares copy-on-write and library pages fairly), once the
   forkserver started with serve has stopped (idle for 60 s; main before: at the same moment):
   targets <= 96 MiB with 1,000 jobs, <= 150 MiB with 10,000; serve's CPU over 25 s idle (target
   < 1% of a core); then a job due 135 s after serve's start: its lateness (the first run after the
   forkserver was stopped: it starts 30 s ahead), and the memory while a run is near and just
   after it (the forkserver, and the reusable worker that idles 120 s, are up then);
4. ``runner jobs trigger`` while the forkserver is stopped (it starts for the run) and while it is up.

Run: python tests/bench/bench_serve.py [--seconds 30] [--only lateness|model|idle]
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
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from _before import Tree, trees  # noqa: E402

from runner.serve.planner import JobState  # noqa: E402
from runner.serve.state import save_sight  # noqa: E402
from runner.store import Store  # noqa: E402
from runner.testing import FakeOpenAI, final  # noqa: E402

HERE = Tree("this tree", REPO, sys.executable)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


class Serve:
    def __init__(self, root: Path, jobs: str, extra_env: dict[str, str] | None = None, tree: Tree = HERE):
        self.root, self.home, self.tree = root, root / "home", tree
        (root / "jobs.yaml").write_text(jobs)
        self.home.mkdir(exist_ok=True)
        (self.home / "config.yaml").write_text("serve: {max_parallel: 4, shutdown_grace: 5}\n")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RUNNER_"))}
        self.env.update(RUNNER_HOME=str(self.home), RUNNER_JOBS=str(root / "jobs.yaml"), PYTHONPATH=str(tree.repo))
        self.env.update(extra_env or {})
        self.log = root / "serve.stderr"

    def start(self) -> Serve:
        self.proc = subprocess.Popen(
            [self.tree.python, "-m", "runner", "serve"],
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


def seed_states(home: Path, period: int, slots: dict[str, datetime]) -> None:
    """Each job (``every PERIODs``)'s stored state says its next slot is the one given (no first sight)."""
    store = Store.open(home / "runner.db")
    for name, slot in slots.items():
        last = slot - timedelta(seconds=period)
        save_sight(store, JobState(name, f"every {period}s", first_seen=slot - timedelta(days=1), last_slot=last, resolved_at=slot))
    store.close()


@dataclass(frozen=True)
class Lateness:
    fires: int
    statuses: dict[str, int]
    ready: float
    fire_ms: list[float]
    spawn_ms: list[float]
    start_ms: list[float]


def lateness(tree: Tree, jobs: int, seconds: float) -> Lateness:
    """``jobs`` script-only jobs, each every ``jobs / 10`` s, their grids 0.1 s apart: ~10 fires/s."""
    period = jobs // 10
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        text = "jobs:\n" + "".join(
            f"  j{i:05d}:\n    schedule: every {period}s\n    agent: false\n    pre_run: 'true'\n" for i in range(jobs)
        )
        serve = Serve(root, text, tree=tree)
        t0 = (datetime.now(UTC) + timedelta(seconds=15 + jobs / 1000)).replace(microsecond=0)
        seed_states(serve.home, period, {f"j{i:05d}": t0 + timedelta(seconds=i * 0.1) for i in range(jobs)})
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
    return Lateness(
        len(rows),
        {st: sum(1 for r in rows if r[3] == st) for st in {r[3] for r in rows}},
        ready,
        [(ts(r[1]) - ts(r[0])).total_seconds() * 1000 for r in rows],
        [(spawned[r[4]] - ts(r[0])).total_seconds() * 1000 for r in rows if r[4] in spawned],
        [(ts(r[2]) - ts(r[0])).total_seconds() * 1000 for r in rows if r[2]],
    )


def bench_lateness(seconds: float) -> None:
    for jobs in (1000, 10_000):
        print(f"fire lateness, {jobs} jobs defined, ~10 fires/s for {seconds:.0f} s (targets: running p50 <= 50 ms, p99 <= 250 ms):")
        for tree in trees():
            m = lateness(tree, jobs, seconds)
            print(f"  {tree.name:<12} {m.fires} fires {m.statuses}, serve ready in {m.ready:.1f} s")
            print(f"    slot -> ledger row      p50 {pct(m.fire_ms, 50):6.1f} ms   p99 {pct(m.fire_ms, 99):6.1f} ms")
            print(f"    slot -> process forked  p50 {pct(m.spawn_ms, 50):6.1f} ms   p99 {pct(m.spawn_ms, 99):6.1f} ms   (serve's log)")
            print(f"    slot -> worker running  p50 {pct(m.start_ms, 50):6.1f} ms   p99 {pct(m.start_ms, 99):6.1f} ms")


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


def kb(pid: int, name: str, key: str) -> int:
    """A ``key: N kB`` line of /proc/PID/NAME (0 when the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        return 0
    return 0


def tree_pids(pid: int) -> list[int]:
    """``pid`` and every process under it."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(c for c, parent in parents.items() if parent == p)
    return out


@dataclass(frozen=True)
class Memory:
    rss: float  # MiB, summed over serve and everything under it
    pss: float
    processes: int

    def __str__(self) -> str:
        return f"RSS {self.rss:6.1f} MiB   PSS {self.pss:6.1f} MiB   ({self.processes} process{'es' if self.processes > 1 else ''})"


def memory(pid: int) -> Memory:
    pids = tree_pids(pid)
    rss = sum(kb(p, "status", "VmRSS") for p in pids) / 1024
    pss = sum(kb(p, "smaps_rollup", "Pss") for p in pids) / 1024
    return Memory(rss, pss, len(pids))


def cpu_ticks(pid: int) -> int:
    """utime + stime (clock ticks) of ``pid`` and its live descendants."""
    total = 0
    for p in tree_pids(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total


@dataclass(frozen=True)
class Idle:
    ready: float
    idle: Memory
    cpu_pct: float
    probe_ms: float | None  # slot -> worker running of the job due 75 s after the start
    near: Memory  # a few seconds before the probe's slot
    after: Memory  # a few seconds after its run


SETTLE_S = 65.0  # after serve is ready: the forkserver started with it stops once idle for 60 s
PROBE_S = 135.0  # the probe job's slot, after serve's start: the forkserver starts again 30 s before
CPU_S = 25.0  # idle CPU window (it ends before the forkserver starts for the probe)


def idle(tree: Tree, jobs: int) -> Idle:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        far = (datetime.now(UTC) + timedelta(hours=12)).hour  # every job fires at this hour: hours away
        text = "jobs:\n" + "".join(
            f"  j{i:05d}:\n    schedule: '{i % 60} {far} * * *'\n    agent: false\n    pre_run: 'true'\n" for i in range(jobs)
        )
        text += "  probe:\n    schedule: every 86400s\n    agent: false\n    pre_run: 'true'\n"
        serve = Serve(root, text, tree=tree)
        launched = datetime.now(UTC)
        probe = (launched + timedelta(seconds=PROBE_S)).replace(microsecond=0)
        seed_states(serve.home, 86400, {"probe": probe})
        serve.start()
        ready = serve.wait_ready()
        settled = time.monotonic() + SETTLE_S  # main before's forkserver never stops: it waits as long
        while time.monotonic() < settled and forkserver_up(serve.proc.pid):
            time.sleep(0.5)
        time.sleep(3)
        idle_mem = memory(serve.proc.pid)
        ticks = cpu_ticks(serve.proc.pid)
        began = time.monotonic()
        time.sleep(CPU_S)
        cpu = (cpu_ticks(serve.proc.pid) - ticks) / os.sysconf("SC_CLK_TCK") / (time.monotonic() - began) * 100
        if (probe - datetime.now(UTC)).total_seconds() < 30:
            print(f"  ({tree.name}: serve started late, the idle CPU window ran into the probe's lead)")
        time.sleep(max(0.0, (probe - datetime.now(UTC)).total_seconds() - 3))
        near = memory(serve.proc.pid)
        time.sleep(6)
        after = memory(serve.proc.pid)
        serve.stop()
        rows = serve.query("SELECT slot, started_at FROM runs WHERE job='probe' AND started_at IS NOT NULL")
    probe_ms = (ts(rows[0][1]) - ts(rows[0][0])).total_seconds() * 1000 if rows else None
    return Idle(ready, idle_mem, cpu, probe_ms, near, after)


def bench_idle() -> None:
    print("a lean daemon: serve and every process under it (sums), jobs none due for hours:")
    for jobs, target in ((1000, 96), (10_000, 150)):
        for tree in trees():
            m = idle(tree, jobs)
            print(f"  {jobs:>6} jobs, {tree.name:<12} (ready in {m.ready:.1f} s)")
            print(f"    idle                       {m.idle}   target <= {target} MiB")
            print(f"    idle CPU over {CPU_S:.0f} s           {m.cpu_pct:5.2f}% of a core   target < 1%")
            probe = f"{m.probe_ms:.1f} ms" if m.probe_ms is not None else "did not run"
            print(f"    a run due in 3 s           {m.near}")
            print(f"    3 s after it               {m.after}")
            print(f"    its slot -> worker running {probe}   target p99 <= 250 ms")


def forkserver_up(serve_pid: int) -> bool:
    for pid in tree_pids(serve_pid):
        try:
            if b"runner.run.forks" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


def bench_cold_trigger(rounds: int = 5) -> None:
    """``runner jobs trigger`` of a script-only job while the forkserver is stopped (it starts for the
    run, and serve's loop waits for it) and right after a run (it is up): ledger row -> worker running."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        serve = Serve(root, "jobs:\n  t:\n    agent: false\n    pre_run: 'true'\n")
        (serve.home / "config.yaml").write_text(
            "serve: {max_parallel: 4, shutdown_grace: 5, worker_max_runs: 1, forkserver_idle_s: 1}\n"
        )
        serve.start()
        serve.wait_ready()
        cold: list[float] = []
        warm: list[float] = []
        for _ in range(rounds):
            for sample in (cold, warm):
                if sample is cold:
                    deadline = time.monotonic() + 30
                    while forkserver_up(serve.proc.pid) and time.monotonic() < deadline:
                        time.sleep(0.1)
                before = len(serve.query("SELECT id FROM runs WHERE started_at IS NOT NULL"))
                subprocess.run([sys.executable, "-m", "runner", "jobs", "trigger", "t"], env=serve.env, cwd=root, check=True, capture_output=True)
                deadline = time.monotonic() + 30
                while len(serve.query("SELECT id FROM runs WHERE ended_at IS NOT NULL")) <= before and time.monotonic() < deadline:
                    time.sleep(0.05)
                row = serve.query("SELECT created_at, started_at FROM runs ORDER BY created_at DESC LIMIT 1")[0]
                sample.append((ts(row[1]) - ts(row[0])).total_seconds() * 1000)
        serve.stop()
    print(f"jobs trigger -> worker running, this tree, {rounds} each (forkserver_idle_s: 1, worker_max_runs: 1):")
    print(f"  forkserver stopped (started for the run)   median {statistics.median(cold):6.1f} ms   max {max(cold):6.1f} ms")
    print(f"  forkserver up (right after a run)          median {statistics.median(warm):6.1f} ms   max {max(warm):6.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30.0, help="length of the lateness runs")
    parser.add_argument("--fires", type=int, default=15, help="fires measured for the model benchmark")
    parser.add_argument("--only", choices=("lateness", "model", "idle"), help="run only this part")
    args = parser.parse_args()
    if args.only in (None, "lateness"):
        bench_lateness(args.seconds)
    if args.only in (None, "model"):
        bench_first_request(args.fires)
    if args.only in (None, "idle"):
        bench_idle()
        bench_cold_trigger()


if __name__ == "__main__":
    main()
