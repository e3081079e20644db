"""Live control (issue 16): what a trigger and a cancel cost, beside main before (/work/base).

1. `runner jobs trigger` under a running serve: request written -> ledger row (serve picked it up)
   and -> worker running, p50 / p99 over ``--samples`` triggers (target < 1 s), this tree's serve
   and then main before's.
2. serve idle CPU over ``--idle`` seconds with one scheduled job far from due: the schedule
   ticker now reads ``PRAGMA data_version`` each tick for control requests (this tree beside main
   before, alternating).
3. A one-turn `run-job` (the cancel watch thread every run now has): wall and CPU, this tree beside
   main before, alternating.

Floors, what the same work costs with runner out of the way: for the trigger, a bare ``sqlite3``
row written by one connection and read by another (-> ledger row), then ``subprocess.run(["true"])``
too (-> running); idle CPU, a process asleep (0%); the one-turn run, a bare ``python -c`` that
imports openai and makes the same request, timed in the same alternation.

Run: python tests/bench/bench_control.py [--samples 20] [--idle 10] [--runs 8]
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
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _before import Tree, side_by_side, time_argv, trees  # noqa: E402
from _common import REPO, beside, clean_env  # noqa: E402

sys.path.insert(0, str(REPO))

from runner.store import Store  # noqa: E402
from runner.store.control import request_trigger  # noqa: E402
from runner.testing import FakeOpenAI, final  # noqa: E402

CONFIG = "serve:\n  max_parallel: 4\n  heartbeat_s: 5\n"


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def ts(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def start_serve(tree: Tree, root: Path, home: Path, jobs: str) -> subprocess.Popen[bytes]:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(CONFIG)
    (root / "jobs.yaml").write_text(jobs)
    env = tree.env(RUNNER_HOME=str(home), RUNNER_JOBS=str(root / "jobs.yaml"))
    log = open(root / f"serve-{tree.name.replace(' ', '-')}.log", "w")  # noqa: SIM115 - lives with the process
    proc = subprocess.Popen(
        [tree.python, "-m", "runner", "serve"], env=env, cwd=root, stdout=subprocess.DEVNULL, stderr=log
    )
    deadline = time.monotonic() + 30
    while "serve started" not in (root / log.name).read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"serve did not start: {(root / log.name).read_text()[-800:]}")
        time.sleep(0.05)
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def trigger_floor(samples: int) -> tuple[float, float]:
    """Medians in ms: a bare sqlite3 row written and read by a second connection; that and a spawned `true`."""
    seen, spawned = [], []
    with tempfile.TemporaryDirectory() as tmp:
        writer = sqlite3.connect(Path(tmp) / "floor.db", isolation_level=None)
        writer.execute("PRAGMA journal_mode=WAL")
        writer.execute("CREATE TABLE requests (id INTEGER PRIMARY KEY, job TEXT)")
        reader = sqlite3.connect(Path(tmp) / "floor.db", isolation_level=None)
        for i in range(samples):
            started = time.perf_counter()
            writer.execute("INSERT INTO requests (job) VALUES ('t')")
            assert reader.execute("SELECT job FROM requests WHERE id = ?", (i + 1,)).fetchone()
            seen.append((time.perf_counter() - started) * 1000)
            subprocess.run(["true"], check=True)
            spawned.append((time.perf_counter() - started) * 1000)
        writer.close()
        reader.close()
    return statistics.median(seen), statistics.median(spawned)


def trigger_latency(samples: int) -> None:
    found = {tree.name: one_trigger_latency(tree, samples) for tree in trees()}
    floors = trigger_floor(samples)
    what = ("bare sqlite3: a row written, read by a 2nd connection", "the same, then subprocess.run(['true'])")
    for i, label in enumerate(("trigger -> ledger row, p50", "trigger -> worker running, p50")):
        before = found.get("main before")
        beside(label, found["this tree"][i], before and before[i], floors[i], what[i], "< 1000 ms")


def one_trigger_latency(here: Tree, samples: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        root, home = Path(tmp), Path(tmp) / "home"
        proc = start_serve(here, root, home, "jobs:\n  t:\n    agent: false\n    pre_run: 'true'\n")
        store = Store.open(home / "runner.db")
        picked, running = [], []
        try:
            for _ in range(samples):
                request_id = request_trigger(store, "t", by="bench@host")
                deadline = time.monotonic() + 30
                while True:
                    row = store.one(
                        "SELECT c.requested_at, r.created_at, r.started_at, r.status FROM control_requests c "
                        "JOIN runs r ON r.id = c.outcome WHERE c.id=?",
                        (request_id,),
                    )
                    if row and row["status"] not in ("queued", "running"):
                        break
                    if time.monotonic() > deadline:
                        raise SystemExit("a trigger did not run within 30 s")
                    time.sleep(0.02)
                picked.append(ts(row["created_at"]) - ts(row["requested_at"]))
                running.append(ts(row["started_at"]) - ts(row["requested_at"]))
                time.sleep(0.3)  # serve idle again between samples
        finally:
            store.close()
            stop(proc)
    for label, values in (("trigger -> ledger row (serve took it)", picked), ("trigger -> worker running", running)):
        ms = [v * 1000 for v in values]
        print(f"{here.name}: {label:<44} p50 {pct(ms, 50):7.1f} ms   p99 {pct(ms, 99):7.1f} ms   target < 1000 ms")
    return pct([v * 1000 for v in picked], 50), pct([v * 1000 for v in running], 50)


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def idle_cpu(seconds: float, rounds: int) -> None:
    per: dict[str, list[float]] = {}
    hz = os.sysconf("SC_CLK_TCK")
    for _ in range(rounds):
        for tree in trees():
            with tempfile.TemporaryDirectory() as tmp:
                root = Path(tmp)
                proc = start_serve(
                    tree, root, root / "home", "jobs:\n  far:\n    schedule: '0 3 1 1 *'\n    prompt: hi\n"
                )
                time.sleep(1.0)  # start-up done
                before = cpu_ticks(proc.pid)
                time.sleep(seconds)
                used = (cpu_ticks(proc.pid) - before) / hz
                stop(proc)
            per.setdefault(tree.name, []).append(100 * used / seconds)
    shown = "   ".join(f"{name} {statistics.median(v):.2f}% CPU" for name, v in per.items())
    print(f"{'serve idle (one job far from due)':<44} {shown}")
    before = per.get("main before")
    beside("serve idle, CPU", statistics.median(per["this tree"]), before and statistics.median(before), 0.0,
           "a process asleep", "", "%")


ASK = "import openai\nopenai.OpenAI().chat.completions.create(model='m', messages=[{'role': 'user', 'content': 'hi'}])"


def run_job(runs: int) -> None:
    fake = FakeOpenAI().start()
    fake.default = final("done")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            (root / "jobs.yaml").write_text("jobs:\n  one:\n    prompt: hi\n    deliver: []\n")
            argv, envs = {}, {}
            for tree in trees():
                home = root / f"home-{tree.name.replace(' ', '-')}"
                envs[tree.name] = tree.env(
                    RUNNER_HOME=str(home),
                    RUNNER_JOBS=str(root / "jobs.yaml"),
                    OPENAI_BASE_URL=fake.base_url,
                    OPENAI_API_KEY="sk-bench-0123456789abcdef",
                )
                argv[tree.name] = [tree.python, "-m", "runner", "run-job", "one"]
            argv["floor"] = [sys.executable, "-c", ASK]
            envs["floor"] = clean_env(OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="sk-bench-0123456789abcdef")
            timed = time_argv(argv, envs, root, runs)
            side_by_side("one-turn run-job (cancel watch per run)", {k: v for k, v in timed.items() if k != "floor"})
            before = timed.get("main before")
            beside("one-turn run-job", timed["this tree"].wall, before and before.wall, timed["floor"].wall,
                   "python -c: import openai, the same request", "", "s")
    finally:
        fake.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--idle", type=float, default=6.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--runs", type=int, default=6)
    args = parser.parse_args()
    print("(the machine may be shared: figures are medians of alternating runs)")
    trigger_latency(args.samples)
    idle_cpu(args.idle, args.rounds)
    run_job(args.runs)


if __name__ == "__main__":
    main()
