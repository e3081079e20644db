"""PostgreSQL store benchmarks (issue 17), and the SQLite figures beside main before.

Run: ``python tests/bench/bench_pg.py [--tasks 4000] [--processes 8] [--rounds 3]``.

1. Kanban claims+completes on PostgreSQL with N processes (``tests/kanban_claimer.py``, the board
   API in real processes; claims are ``FOR UPDATE SKIP LOCKED``): target >= 500 tasks/s. A server
   of its own is started in a temporary folder (``tests/pgserver.py``; needs
   /usr/lib/postgresql/15/bin and psycopg).
2. The SQLite store's hot paths, this tree and main before, alternating, medians of ``--rounds``:
   the same kanban throughput on a runner.db, and in one process ``ledger.open_run`` + 20 events +
   ``ledger.finish`` per run (the ledger and the event ``Recorder``): unchanged within noise.
3. The skills mirror on PostgreSQL (``runner.skills.shared``): two machines' home skills folders on
   one store, ``--skills`` skills: a reader's ``pull`` when nothing changed, a one-file change
   (pull + hash of the tree + publish, in one transaction), and the other machine's ``pull`` of it;
   medians in ms. With SQLite none of this runs (0).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).parent))

from _before import trees  # noqa: E402

LEDGER = """
import sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from runner.safety.redact import Redactor
from runner.store import Store
from runner.events import Event, ToolResult
from runner.store.runs import Recorder
from runner.store import ledger
store = Store.open(Path(sys.argv[2]))
n = int(sys.argv[3])
start = time.perf_counter()
for i in range(n):
    run_id = ledger.open_run(store, job="bench", trigger="manual")
    emit = Recorder(store, run_id, Redactor(include_env=False))
    for j in range(20):
        emit(Event.TOOL_RESULT, ToolResult(str(j), "shell", f"line {j} of run {i}", 20, False, 0.0))
    ledger.finish(store, run_id, "succeeded")
print(n / (time.perf_counter() - start))
"""

SEED = """
import sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from runner.clock import utcnow
from runner.store.board import Board
from runner.store import Store
if sys.argv[2].startswith("postgresql"):  # main before has only SQLite
    from runner.store.dialect import parse
    store = Store.open(parse(sys.argv[2]))
else:
    store = Store.open(Path(sys.argv[2]))
board = Board(store)
now = utcnow()
with store.transaction():
    for i in range(int(sys.argv[3])):
        board.add(f"task {i}", now=now, job="echo")
"""


def claims(repo: Path, python: str, db: str, tasks: int, processes: int, tmp: Path) -> float:
    """Tasks claimed and completed per second by ``processes`` claimers of tree ``repo``."""
    subprocess.run([python, "-c", SEED, str(repo), db, str(tasks)], check=True)
    claimer = repo / "tests" / "kanban_claimer.py"
    logs = [tmp / f"claims-{i}.log" for i in range(processes)]
    started = time.monotonic()
    procs = [
        subprocess.Popen([python, str(claimer), db, f"bench-{i}", str(logs[i]), "--lease", "600"])
        for i in range(processes)
    ]
    codes = [p.wait() for p in procs]
    elapsed = time.monotonic() - started
    if set(codes) != {0}:
        raise SystemExit(f"a claimer failed: exit codes {codes}")
    done = sum(1 for log in logs for line in log.read_text().splitlines() if line.split()[4] == "1")
    if done != tasks:
        raise SystemExit(f"{done} of {tasks} tasks completed")
    return done / elapsed


def ledger(repo: Path, python: str, db: Path, runs: int) -> float:
    out = subprocess.run([python, "-c", LEDGER, str(repo), str(db), str(runs)], check=True, capture_output=True)
    return float(out.stdout.decode().strip())


@contextmanager
def pg_server(what: str) -> Iterator[Any]:
    """A PostgreSQL server of the benchmark's own (``tests/pgserver.py``), or None when this machine
    has none (``what`` is then printed as skipped, with the reason)."""
    from tests import pgserver

    why = pgserver.available()
    if why:
        print(f"{what}: skipped ({why})")
        yield None
        return
    server = pgserver.PgServer.start()
    try:
        yield server
    finally:
        server.stop()


def postgresql(tasks: int, processes: int, rounds: int) -> None:
    with pg_server("PostgreSQL") as server:
        if server is None:
            return
        rates = []
        for _ in range(rounds):
            url = server.fresh()
            with tempfile.TemporaryDirectory() as tmp:
                rates.append(claims(REPO, sys.executable, url, tasks, processes, Path(tmp)))
            server.drop(url)
        rate = statistics.median(rates)
        ok = "ok" if rate >= 500 else "MISSED"
        print(f"kanban claim+complete on PostgreSQL, {processes} processes, {tasks} tasks, median of {rounds}:")
        print(f"  {rate:8.0f} tasks/s   (runs: {', '.join(f'{r:.0f}' for r in rates)})   target >= 500  {ok}")


def sqlite(tasks: int, processes: int, rounds: int) -> None:
    found = trees()
    kanban: dict[str, list[float]] = {t.name: [] for t in found}
    runs: dict[str, list[float]] = {t.name: [] for t in found}
    for _ in range(rounds):
        for tree in found:  # alternating, so load on the machine hits both alike
            with tempfile.TemporaryDirectory() as tmp:
                kanban[tree.name].append(
                    claims(tree.repo, tree.python, str(Path(tmp) / "runner.db"), tasks, processes, Path(tmp))
                )
            with tempfile.TemporaryDirectory() as tmp:
                runs[tree.name].append(ledger(tree.repo, tree.python, Path(tmp) / "runner.db", 300))
    print(f"SQLite, median of {rounds} (alternating trees):")
    for tree in found:
        k, r = statistics.median(kanban[tree.name]), statistics.median(runs[tree.name])
        print(
            f"  {tree.name:<12} kanban {processes} processes {k:8.0f} tasks/s    ledger {r:7.0f} runs/s (20 events each)"
        )


def mirror(skills: int, changes: int) -> None:
    from runner.skills.shared import SharedTree
    from runner.store import Store
    from runner.store.dialect import parse

    with pg_server("skills mirror") as server:
        if server is None:
            return
        url = server.fresh()
        with tempfile.TemporaryDirectory() as tmp:
            a_store, b_store = Store.open(parse(url)), Store.open(parse(url))
            a, b = SharedTree(a_store, Path(tmp) / "a"), SharedTree(b_store, Path(tmp) / "b")
            with a.changing():
                for i in range(skills):
                    folder = a.root / f"skill-{i:03d}"
                    folder.mkdir(parents=True)
                    (folder / "SKILL.md").write_text(f"---\nname: skill-{i:03d}\n---\n" + "A step.\n" * 80)
            seeded = _ms(b.pull)
            idle, change, follow = [], [], []
            for n in range(changes):
                idle.append(_ms(a.pull))
                target = a.root / f"skill-{n % skills:03d}" / "SKILL.md"

                def edit(target: Path = target, n: int = n) -> None:
                    with a.changing():
                        target.write_text(target.read_text() + f"change {n}\n")

                change.append(_ms(edit))
                follow.append(_ms(b.pull))
            a_store.close()
            b_store.close()
        server.drop(url)
        med = statistics.median
        print(f"skills mirror on PostgreSQL, {skills} skills, medians of {changes}:")
        print(f"  reader pull, nothing changed {med(idle):7.2f} ms")
        print(f"  one-file change (pull + hash + publish) {med(change):7.2f} ms")
        print(
            f"  the other machine's pull of it {med(follow):7.2f} ms   (first pull of the whole tree: {seeded:.0f} ms)"
        )


def _ms(fn: object) -> float:
    start = time.perf_counter()
    fn()  # type: ignore[operator]
    return (time.perf_counter() - start) * 1000


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tasks", type=int, default=4000)
    p.add_argument("--processes", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--skills", type=int, default=50)
    p.add_argument("--only", choices=["postgresql", "sqlite", "mirror"])
    args = p.parse_args()
    print("(the machine is shared: figures are noisy)")
    if args.only in (None, "postgresql"):
        postgresql(args.tasks, args.processes, args.rounds)
    if args.only in (None, "sqlite"):
        sqlite(args.tasks, args.processes, args.rounds)
    if args.only in (None, "mirror"):
        mirror(args.skills, 30)


if __name__ == "__main__":
    main()
