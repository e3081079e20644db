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

Main before: each part on its tree and Python too (it has the PostgreSQL store; a Python without
psycopg prints why it was not measured). Floors, the same database work with runner out of the
way: for the claims, the same processes doing bare claims and completions on a plain tasks table
(psycopg with ``FOR UPDATE SKIP LOCKED``; ``sqlite3`` with BEGIN IMMEDIATE); for the ledger, bare
``sqlite3`` writing a run row, its 20 event rows and its end, a transaction each; for the mirror,
psycopg: one ``SELECT 1`` round trip (a pull with nothing new), one transaction upserting the
file's bytes (a change), one ``SELECT`` of them written to the file (the other machine's pull).
"""

from __future__ import annotations

import argparse
import sqlite3
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

from _before import in_tree, or_reason, trees  # noqa: E402
from _common import beside  # noqa: E402

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


PG_FLOOR = """
import sys, psycopg
conn = psycopg.connect(sys.argv[1])
while True:
    with conn.transaction():
        row = conn.execute(
            "SELECT id FROM floor_tasks WHERE status = 'todo' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED"
        ).fetchone()
        if row is not None:
            conn.execute("UPDATE floor_tasks SET status = 'running', owner = %s WHERE id = %s", (sys.argv[2], row[0]))
    if row is None:
        remaining = conn.execute("SELECT COUNT(*) FROM floor_tasks WHERE status != 'done'").fetchone()[0]
        conn.commit()
        if remaining == 0:
            break
        continue
    with conn.transaction():
        conn.execute("UPDATE floor_tasks SET status = 'done' WHERE id = %s", (row[0],))
"""


def pg_floor(url: str, tasks: int, processes: int) -> float:
    """Tasks per second of ``processes`` bare psycopg claimers over a plain table of ``tasks`` rows."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE floor_tasks (id SERIAL PRIMARY KEY, title TEXT, status TEXT, owner TEXT)")
        conn.execute("CREATE INDEX floor_tasks_status ON floor_tasks (status)")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO floor_tasks (title, status) VALUES (%s, 'todo')", [(f"task {i}",) for i in range(tasks)])
    started = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-c", PG_FLOOR, url, f"floor-{i}"]) for i in range(processes)]
    if any(p.wait() for p in procs):
        raise SystemExit("a floor claimer failed")
    return tasks / (time.monotonic() - started)


def ledger_floor(runs: int) -> float:
    """Runs per second of bare sqlite3 writing a run row, 20 event rows and the run's end, a
    transaction each."""
    with tempfile.TemporaryDirectory() as tmp:
        conn = sqlite3.connect(Path(tmp) / "floor.db", isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("CREATE TABLE runs (id TEXT PRIMARY KEY, job TEXT, status TEXT)")
        conn.execute("CREATE TABLE run_events (run_id TEXT, seq INT, kind TEXT, payload TEXT, PRIMARY KEY (run_id, seq))")
        start = time.perf_counter()
        for i in range(runs):
            conn.execute("INSERT INTO runs VALUES (?, 'bench', 'running')", (f"r{i}",))
            for j in range(20):
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT INTO run_events VALUES (?, ?, 'tool_result', ?)", (f"r{i}", j, f"line {j} of run {i}"))
                conn.execute("COMMIT")
            conn.execute("UPDATE runs SET status = 'succeeded' WHERE id = ?", (f"r{i}",))
        took = time.perf_counter() - start
        conn.close()
    return runs / took


def claims(repo: Path, python: str, db: str, tasks: int, processes: int, tmp: Path) -> float:
    """Tasks claimed and completed per second by ``processes`` claimers of tree ``repo``."""
    seeded = subprocess.run([python, "-c", SEED, str(repo), db, str(tasks)], capture_output=True, text=True)
    if seeded.returncode != 0:
        raise SystemExit(f"seeding the board failed: {seeded.stderr.strip().splitlines()[-1]}")
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
        both = trees()
        rates: dict[str, list[float]] = {t.name: [] for t in both}
        floors, gone = [], {}
        for _ in range(rounds):
            for tree in both:
                if tree.name in gone:
                    continue
                url = server.fresh()
                with tempfile.TemporaryDirectory() as tmp:
                    found = or_reason(tree, lambda t=tree, u=url, d=tmp: claims(t.repo, t.python, u, tasks, processes, Path(d)))
                if isinstance(found, str):
                    gone[tree.name] = found
                else:
                    rates[tree.name].append(found)
                server.drop(url)
            url = server.fresh()
            floors.append(pg_floor(url, tasks, processes))
            server.drop(url)
        rate = statistics.median(rates["this tree"])
        ok = "ok" if rate >= 500 else "MISSED"
        print(f"kanban claim+complete on PostgreSQL, {processes} processes, {tasks} tasks, median of {rounds}:")
        print(f"  {rate:8.0f} tasks/s   (runs: {', '.join(f'{r:.0f}' for r in rates['this tree'])})   target >= 500  {ok}")
        if "main before" in gone:
            print(f"  main before: {gone['main before']}")
        then = rates.get("main before")
        beside("PostgreSQL claim+complete", rate, statistics.median(then) if then else gone.get("main before") and "not measured",
               statistics.median(floors), "bare psycopg claimers, FOR UPDATE SKIP LOCKED", ">= 500 tasks/s", "tasks/s")


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
    from bench_kanban import floor_throughput

    floors = []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as tmp:
            floors.append(floor_throughput(Path(tmp), tasks, processes))
    kanban_floor = statistics.median(floors)
    then_k, then_r = kanban.get("main before"), runs.get("main before")
    beside("SQLite claim+complete", statistics.median(kanban["this tree"]), then_k and statistics.median(then_k),
           kanban_floor, "bare sqlite3 claimers on a plain tasks table", "", "tasks/s")
    beside("SQLite ledger, 20 events a run", statistics.median(runs["this tree"]), then_r and statistics.median(then_r),
           statistics.median(ledger_floor(300) for _ in range(rounds)), "bare sqlite3: run row, 20 events, end", "", "runs/s")


def mirror_figures(skills: int, changes: int) -> dict[str, float] | str:
    """Medians in ms of the mirror's three figures and the first pull (a reason when no server)."""
    from runner.skills.shared import SharedTree
    from runner.store import Store
    from runner.store.dialect import parse
    from tests import pgserver

    why = pgserver.available()
    if why:
        return why
    server = pgserver.PgServer.start()
    try:
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
        return {"idle": med(idle), "change": med(change), "follow": med(follow), "seeded": seeded}
    finally:
        server.stop()


def mirror_floor(changes: int) -> dict[str, float]:
    """Medians in ms of the bare psycopg floors of the mirror's three figures."""
    import psycopg

    with pg_server("skills mirror floor") as server, tempfile.TemporaryDirectory() as tmp:
        url = server.fresh()
        idle, change, follow = [], [], []
        with psycopg.connect(url, autocommit=True) as a, psycopg.connect(url, autocommit=True) as b:
            a.execute("CREATE TABLE floor_files (path TEXT PRIMARY KEY, body BYTEA)")
            body = b"---\nname: skill\n---\n" + b"A step.\n" * 80
            for n in range(changes):
                idle.append(_ms(lambda: a.execute("SELECT 1").fetchone()))
                body += f"change {n}\n".encode()

                def upsert(body: bytes = body) -> None:
                    with a.transaction():
                        a.execute("INSERT INTO floor_files VALUES ('s/SKILL.md', %s) ON CONFLICT (path) DO UPDATE "
                                  "SET body = excluded.body", (body,))

                change.append(_ms(upsert))
                fetched = Path(tmp) / "SKILL.md"
                follow.append(_ms(lambda f=fetched: f.write_bytes(b.execute("SELECT body FROM floor_files").fetchone()[0])))
        server.drop(url)
    med = statistics.median
    return {"idle": med(idle), "change": med(change), "follow": med(follow)}


def mirror(skills: int, changes: int) -> None:
    found = {t.name: or_reason(t, lambda t=t: in_tree(t, "bench_pg", "mirror_figures", skills, changes)) for t in trees()}
    here, before = found["this tree"], found.get("main before")
    if isinstance(here, str):
        print(f"skills mirror: skipped ({here})")
        return
    print(f"skills mirror on PostgreSQL, {skills} skills, medians of {changes}:")
    print(f"  reader pull, nothing changed {here['idle']:7.2f} ms")
    print(f"  one-file change (pull + hash + publish) {here['change']:7.2f} ms")
    print(
        f"  the other machine's pull of it {here['follow']:7.2f} ms   (first pull of the whole tree: {here['seeded']:.0f} ms)"
    )
    if isinstance(before, str):
        print(f"  main before: {before}")
    floor = mirror_floor(changes)
    for key, label, what in (
        ("idle", "mirror: reader pull, nothing changed", "psycopg: one SELECT 1 round trip"),
        ("change", "mirror: one-file change", "psycopg: one transaction upserting the file"),
        ("follow", "mirror: the other machine's pull", "psycopg: one SELECT, the file written"),
    ):
        then = before[key] if isinstance(before, dict) else before and "not measured (see above)"
        beside(label, here[key], then, floor[key], what, "")


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
    p.add_argument("--changes", type=int, default=30, help="changes timed in the mirror")
    p.add_argument("--only", choices=["postgresql", "sqlite", "mirror"])
    args = p.parse_args()
    print("(the machine is shared: figures are noisy)")
    if args.only in (None, "postgresql"):
        postgresql(args.tasks, args.processes, args.rounds)
    if args.only in (None, "sqlite"):
        sqlite(args.tasks, args.processes, args.rounds)
    if args.only in (None, "mirror"):
        mirror(args.skills, args.changes)


if __name__ == "__main__":
    main()
