"""Kanban latency under `runner serve` and under `runner kanban dispatch`, this tree beside main
before (/work/base): a one-turn agent task (it calls kanban_complete) is added to the board while
the dispatcher idles with the default config (``poll_seconds: 1``), one task at a time.

Printed per dispatcher: add -> worker started (the worker records itself on the task; target
under serve p50 <= 150 ms), add -> first model request (target <= 400 ms), and the worker's own
start, claimed -> started (target <= 100 ms from the warm forkserver).

Floors, the same with runner out of the way, from a warm Python (serve's workers fork from a warm
forkserver): add -> started, a forked child writing its row with bare ``sqlite3``; add -> first
request, a forked child making one request with an openai client built before the fork;
claimed -> started, a fork and the child's exit.

Run: python tests/bench/bench_kanban_serve.py [--samples 8] [--base /work/base --base-python /tmp/venv-base/bin/python]
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
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(Path(__file__).resolve().parent)]

from _common import beside  # noqa: E402

from runner.clock import utcnow  # noqa: E402
from runner.store import Store  # noqa: E402
from runner.store.board import Board  # noqa: E402
from runner.testing import FakeOpenAI, call, final  # noqa: E402

JOBS = "jobs:\n  agent:\n    prompt: Work on your kanban task.\n    toolsets: [kanban]\n"


@dataclass(frozen=True)
class Tree:
    label: str
    repo: Path
    python: str


def ts(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def events(db_path: Path, task_id: int) -> dict[str, float]:
    db = sqlite3.connect(db_path, timeout=30)
    try:
        rows = db.execute("SELECT kind, ts FROM task_events WHERE task_id=? ORDER BY id", (task_id,)).fetchall()
        created = db.execute("SELECT created_at FROM tasks WHERE id=?", (task_id,)).fetchone()[0]
    finally:
        db.close()
    out = {"created": ts(created)}
    for kind, stamp in rows:
        out.setdefault(kind, ts(stamp))
    return out


def wait_db(db_path: Path, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{proc.args} exited early")
        if db_path.exists():
            try:
                db = sqlite3.connect(db_path, timeout=30)
                if db.execute("SELECT COUNT(*) FROM sqlite_master WHERE name='tasks'").fetchone()[0]:
                    db.close()
                    return
                db.close()
            except sqlite3.OperationalError:
                pass
        time.sleep(0.1)
    raise SystemExit("the dispatcher did not create runner.db")


def scenario(tree: Tree, command: list[str], samples: int) -> dict[str, list[float]]:
    fake = FakeOpenAI().start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            home = root / "home"
            home.mkdir()
            (root / "jobs.yaml").write_text(JOBS)
            # written out: main before passes --config to its workers, and a missing file is then an error
            (home / "config.yaml").write_text("kanban: {poll_seconds: 1}\n")
            env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RUNNER_", "PYTHON"))}
            env.update(
                RUNNER_HOME=str(home),
                RUNNER_JOBS=str(root / "jobs.yaml"),
                PYTHONPATH=str(tree.repo),
                OPENAI_BASE_URL=fake.base_url,
                OPENAI_API_KEY="sk-bench-0123456789abcdef",
            )
            with open(root / "stderr", "w") as err:
                proc = subprocess.Popen(
                    [tree.python, "-m", "runner", *command], env=env, cwd=root, stdout=subprocess.DEVNULL, stderr=err
                )
                try:
                    return _measure(home / "runner.db", proc, fake, samples)
                except SystemExit:
                    print((root / "stderr").read_text()[-3000:], file=sys.stderr)
                    for log in sorted((home / "logs" / "kanban").glob("*.log")):
                        print(log.read_text()[-1500:], file=sys.stderr)
                    raise
                finally:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(timeout=60)
    finally:
        fake.stop()


def _measure(db_path: Path, proc: subprocess.Popen[bytes], fake: FakeOpenAI, samples: int) -> dict[str, list[float]]:
    wait_db(db_path, proc)
    time.sleep(3.0)  # serve / the dispatcher settles (forkserver warm, first ticks done)
    out: dict[str, list[float]] = {"started": [], "request": [], "worker": []}
    for i in range(samples + 1):
        fake.add(call("kanban_complete", {"result": "ok"}), final("done"))
        seen = len(fake.requests)
        store = Store.open(db_path, migrate=False)
        task_id = Board(store).add(f"task {i}", now=utcnow(), job="agent")
        store.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            got = events(db_path, task_id)
            if "completed" in got and len(fake.requests) > seen:
                break
            time.sleep(0.05)
        else:
            raise SystemExit(f"task {task_id} was not completed")
        if i == 0:
            continue  # the first task warms what a first task warms
        first = fake.requests[seen]["time"]
        out["started"].append((got["started"] - got["created"]) * 1000)
        out["request"].append((first - got["created"]) * 1000)
        out["worker"].append((got["started"] - got["claimed"]) * 1000)
        time.sleep(0.3 + 0.7 * (i % 3) / 3)  # tasks arrive at different points of the poll cycle
    return out


def forked(samples: int, child: object) -> float:
    """Median ms from ``os.fork()`` to the child's ``child()`` done and its exit reaped."""
    out = []
    for _ in range(samples):
        started = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            try:
                child()  # type: ignore[operator]
            finally:
                os._exit(0)
        if os.waitpid(pid, 0)[1] != 0:
            raise SystemExit("a floor child failed")
        out.append((time.perf_counter() - started) * 1000)
    return statistics.median(out)


def floors(samples: int) -> dict[str, float]:
    import openai

    fake = FakeOpenAI().start()
    fake.default = final("ok")
    client = openai.OpenAI(base_url=fake.base_url, api_key="sk-bench")
    with tempfile.TemporaryDirectory() as tmp:
        conn = sqlite3.connect(Path(tmp) / "floor.db", isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE started (at REAL)")
        conn.close()

        def write_row() -> None:
            sqlite3.connect(Path(tmp) / "floor.db", isolation_level=None).execute("INSERT INTO started VALUES (1)")

        found = {
            "started": forked(samples, write_row),
            "request": forked(samples, lambda: client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])),
            "worker": forked(samples, lambda: None),
        }
    fake.stop()
    return found


FLOOR_WHAT = {
    "started": "a warm python forked, writing its row",
    "request": "a warm python forked, one openai request",
    "worker": "a fork and its exit",
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--base", default="/work/base", help="main before the change ('' to skip)")
    parser.add_argument("--base-python", default="/tmp/venv-base/bin/python")
    args = parser.parse_args()
    trees = [Tree("this", REPO, sys.executable)]
    if args.base and Path(args.base).is_dir():
        trees.append(Tree("main before", Path(args.base), args.base_python))
    floor = floors(args.samples)
    for name, command in (("under serve", ["serve"]), ("under kanban dispatch", ["kanban", "dispatch"])):
        print(f"kanban {name}, one-turn agent task, {args.samples} tasks one at a time (poll_seconds 1):")
        medians: dict[str, dict[str, float]] = {}
        for tree in trees:
            got = scenario(tree, command, args.samples)
            medians[tree.label] = {key: statistics.median(values) for key, values in got.items()}
            print(f"  [{tree.label}]")
            for key, what, target in (
                ("started", "add -> worker started", "p50 <= 150 ms under serve"),
                ("request", "add -> first model request", "<= 400 ms"),
                ("worker", "claimed -> worker started", "<= 100 ms"),
            ):
                values = got[key]
                print(
                    f"    {what:<28} p50 {statistics.median(values):7.1f} ms   max {max(values):7.1f} ms   (target {target})"
                )
        for key, what, target in (
            ("started", "add -> worker started, p50", "<= 150 ms" if command == ["serve"] else ""),
            ("request", "add -> first model request, p50", "<= 400 ms"),
            ("worker", "claimed -> worker started, p50", "<= 100 ms"),
        ):
            before = medians.get("main before")
            beside(f"  {what}", medians["this"][key], before and before[key], floor[key], FLOOR_WHAT[key], target)


if __name__ == "__main__":
    main()
