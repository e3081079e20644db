"""Memory (issue 18): what a notebook adds to a run's first request, and what a write costs.

1. The first request's body in bytes (as the fake model server receives it) of a one-turn job:
   main before (no memory), this tree with ``memory: off``, with an empty notebook (the tool's
   schema only) and with a full one (1,800-character cap). Target: memory adds <= 2.75 KB
   (2,816 bytes) with a full notebook: 2.5 KB for issue 18, plus the quoted block and its
   "data, not instructions" line of issue 29 (about 160 bytes).
2. Time per memory write through ``runner.memory.write.write`` (injection scan, redaction, one
   ``BEGIN IMMEDIATE`` read-modify-write, the run event) on a real runner.db holding 1,000 other
   notebooks; median and p99. Main before had no memory (n/a).
3. 8 processes x 100 writes to one shared notebook: writes per second, and nothing lost.

Main before has memory too now (issue 18 is in it): each part runs on its tree as well (the
request with its own notebook, the write cost through ``_before.each_tree``, the 8 processes with
its Python). Floors: for the bytes a full notebook adds, the notebook's own text as a JSON string
(what sending it costs at least); for a write, bare ``sqlite3``: one BEGIN IMMEDIATE reading the
notebook's JSON row and writing it back with its version bumped. The concurrent figure's count
(all kept) has no floor.

Run: ``python tests/bench/bench_memory.py [--samples 2000] [--others 1000] [--processes 8] [--per 20]`` (about 30 s).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from _before import Tree, each_tree, trees  # noqa: E402
from _common import beside, row  # noqa: E402

FACT = "The nightly build runs on build-{i:02}.internal; its logs rotate at 02:00 UTC, keep the last 200 lines."


def full_entries() -> list[str]:
    from runner.memory.notebook import CAP_CHARS, Notebook

    nb = Notebook()
    i = 0
    while True:
        bigger = Notebook((*nb.entries, FACT.format(i=i)[:96]))
        if bigger.chars > CAP_CHARS:
            return list(nb.entries)
        nb, i = bigger, i + 1


def seed(home: Path, scope: str, entries: list[str]) -> None:
    from runner.memory.notebook import Notebook, parse_scope
    from runner.memory.notebooks import change
    from runner.store import Store

    store = Store.open(home / "runner.db")
    change(store, parse_scope(scope), lambda _: Notebook(tuple(entries)), by="bench")
    store.close()


def first_request_bytes(python: str, repo: Path, memory: str, entries: list[str] | None) -> int:
    from runner.testing import FakeOpenAI, final

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        key = f"    memory: {memory}\n" if memory else ""
        (root / "jobs.yaml").write_text(f"jobs:\n  report:\n    prompt: Write the daily report.\n{key}")
        if entries is not None:
            seed(root / "home", "job:report", entries)
        fake = FakeOpenAI().start()
        try:
            fake.add(final("done"))
            env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RUNNER_"))}
            env.update(
                HOME=str(root),
                RUNNER_HOME=str(root / "home"),
                RUNNER_JOBS=str(root / "jobs.yaml"),
                OPENAI_BASE_URL=fake.base_url,
                OPENAI_API_KEY="sk-bench-0123456789abcdef",
                PYTHONPATH=str(repo),
            )
            res = subprocess.run(
                [python, "-m", "runner", "run-job", "report"], env=env, cwd=root, capture_output=True, text=True
            )
            if res.returncode != 0:
                raise SystemExit(f"run-job failed: {res.stderr[-500:]}")
            return int(fake.requests[0]["bytes"])
        finally:
            fake.stop()


def request_bytes() -> None:
    entries = full_entries()
    chars = len("\n§\n".join(entries))
    here, *before = trees()
    print(f"first request of a one-turn job, body bytes (full notebook: {len(entries)} entries, {chars:,} chars)")
    off = first_request_bytes(here.python, here.repo, "off", None)
    empty = first_request_bytes(here.python, here.repo, "", None)
    full = first_request_bytes(here.python, here.repo, "", entries)
    added_before: int | None = None
    if before:
        base_off = first_request_bytes(before[0].python, before[0].repo, "off", None)
        base_full = first_request_bytes(before[0].python, before[0].repo, "", entries)
        added_before = base_full - base_off
        row("main before, memory: off / full notebook", f"{base_off:,} / {base_full:,} B", "-")
    row("this tree, memory: off", f"{off:,} B", "-")
    row("this tree, memory: job, empty notebook (tool schema)", f"{empty:,} B (+{empty - off:,})", "-")
    row("this tree, memory: job, full notebook", f"{full:,} B (+{full - off:,})", "+<= 2,816 B")
    beside("bytes a full notebook adds to the request", full - off, added_before,
           len(json.dumps("\n§\n".join(entries))), "the notebook's text as a JSON string", "<= 2,816 B", "B")


def write_floor(samples: int) -> list[float]:
    """Seconds per bare sqlite3 read-modify-write of a notebook's JSON row."""
    with tempfile.TemporaryDirectory() as tmp:
        conn = sqlite3.connect(Path(tmp) / "floor.db", isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("CREATE TABLE notebooks (scope TEXT PRIMARY KEY, entries TEXT, version INT)")
        conn.execute("INSERT INTO notebooks VALUES ('shared:bench', '[]', 0)")
        times = []
        for i in range(samples):
            start = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            entries = json.loads(conn.execute("SELECT entries FROM notebooks WHERE scope = 'shared:bench'").fetchone()[0])
            entries = [*entries, f"fact number {i} about the build"] if i % 2 == 0 else entries[:-1]
            conn.execute(
                "UPDATE notebooks SET entries = ?, version = version + 1 WHERE scope = 'shared:bench'", (json.dumps(entries),)
            )
            conn.execute("COMMIT")
            times.append(time.perf_counter() - start)
        conn.close()
    return times


def write_cost(samples: int = 2_000, others: int = 1_000) -> list[float]:
    from runner.events import encode
    from runner.memory.notebook import Action, Notebook, parse_scope
    from runner.memory.notebooks import change
    from runner.memory.write import Binding, write
    from runner.safety.redact import Redactor
    from runner.store import Store

    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(Path(tmp) / "runner.db")
        with store.transaction():
            for i in range(others):
                change(store, parse_scope(f"shared:n{i}"), lambda _: Notebook(tuple(full_entries()[:8])), by="bench")
        binding = Binding(store, parse_scope("shared:bench"), "run-bench", Redactor(["sk-bench-0123456789abcdef"]))
        events: list[tuple[str, dict[str, object]]] = []
        times = []
        for i in range(samples):
            action, content = (Action.ADD, f"fact number {i} about the build") if i % 2 == 0 else (Action.REMOVE, "")
            start = time.perf_counter()
            write(
                binding,
                action,
                content,
                f"fact number {i - 1} " if action == Action.REMOVE else "",
                lambda k, p: events.append((k, encode(p))),
            )
            times.append(time.perf_counter() - start)
        store.close()
    return sorted(times)


def show_write_cost(samples: int, others: int) -> None:
    found = each_tree("bench_memory", "write_cost", samples, others)
    times, then = found["this tree"], found.get("main before")
    print(
        f"\nmemory write (scan, redaction, BEGIN IMMEDIATE read-modify-write), {samples:,} samples, {others:,} other notebooks"
    )
    row("write: median", f"{statistics.median(times) * 1000:.3f} ms", "-")
    row("write: p99", f"{times[int(len(times) * 0.99)] * 1000:.3f} ms", "-")
    beside("memory write, median", statistics.median(times) * 1000, then and statistics.median(then) * 1000,
           statistics.median(write_floor(samples)) * 1000, "bare sqlite3: read the JSON row, write it back", "")


WORKER = """
import sys
from pathlib import Path
sys.path.insert(0, {repo!r})
from runner.memory.notebook import Action, parse_scope
from runner.memory.write import Binding, write
from runner.store import Store
store = Store.open(Path({db!r}))
b = Binding(store, parse_scope("shared:pool"), "w" + sys.argv[1], str)
for k in range({n}):
    write(b, Action.ADD, f"w{{sys.argv[1]}} fact {{k}}", "", lambda kind, payload: None)
    if k % 2 == 1:
        write(b, Action.REMOVE, "", f"w{{sys.argv[1]}} fact {{k}}", lambda kind, payload: None)
"""


def concurrent(processes: int = 8, per: int = 20) -> None:
    found = {t.name: one_concurrent(t, processes, per) for t in trees()}
    then = found.get("main before")
    beside(f"{processes} processes on one notebook: writes/s", found["this tree"], then, "n/a (process starts dominate; all kept is the check)",
           "", "", "/s")


def one_concurrent(tree: Tree, processes: int, per: int) -> float:
    from runner.store import Store

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "runner.db"
        Store.open(db).close()
        code = WORKER.format(repo=str(tree.repo), db=str(db), n=per)
        start = time.perf_counter()
        procs = [subprocess.Popen([tree.python, "-c", code, str(p)], env=tree.env()) for p in range(processes)]
        for p in procs:
            assert p.wait() == 0
        took = time.perf_counter() - start
        store = Store.open(db)
        row_ = store.one("SELECT entries, version FROM memory_notebooks WHERE scope='shared:pool'")
        store.close()
    assert row_ is not None
    kept = json.loads(row_["entries"])
    expected = {f"w{p} fact {k}" for p in range(processes) for k in range(per) if k % 2 == 0}
    writes = processes * (per + per // 2)
    print(f"\n{tree.name}: {processes} processes x {per} adds (+ {per // 2} removes) on one shared notebook")
    row("writes per second (process start included)", f"{writes / took:,.0f}/s", "-")
    row("entries kept / expected, versions", f"{len(kept)} / {len(expected)}, {row_['version']}", "all kept")
    assert set(kept) == expected and row_["version"] == writes
    return writes / took


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2_000)
    parser.add_argument("--others", type=int, default=1_000)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--per", type=int, default=20)
    args = parser.parse_args()
    print("(machine shared with other engineers: figures are noisy)")
    request_bytes()
    show_write_cost(args.samples, args.others)
    concurrent(args.processes, args.per)
