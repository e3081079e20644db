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

Run: ``python tests/bench/bench_memory.py`` (about 30 s).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from _before import trees  # noqa: E402

from tests.bench._common import row  # noqa: E402

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
    if before:
        base = first_request_bytes(before[0].python, before[0].repo, "", None)
        row("main before (no memory)", f"{base:,} B", "-")
    row("this tree, memory: off", f"{off:,} B", "-")
    row("this tree, memory: job, empty notebook (tool schema)", f"{empty:,} B (+{empty - off:,})", "-")
    row("this tree, memory: job, full notebook", f"{full:,} B (+{full - off:,})", "+<= 2,816 B")


def write_cost(samples: int = 2_000, others: int = 1_000) -> None:
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
    times.sort()
    print(
        f"\nmemory write (scan, redaction, BEGIN IMMEDIATE read-modify-write), {samples:,} samples, {others:,} other notebooks"
    )
    row("write: median", f"{statistics.median(times) * 1000:.3f} ms", "- (main before: n/a)")
    row("write: p99", f"{times[int(len(times) * 0.99)] * 1000:.3f} ms", "-")


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
    from runner.store import Store

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "runner.db"
        Store.open(db).close()
        code = WORKER.format(repo=str(Path(__file__).resolve().parents[2]), db=str(db), n=per)
        start = time.perf_counter()
        procs = [subprocess.Popen([sys.executable, "-c", code, str(p)]) for p in range(processes)]
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
    print(f"\n{processes} processes x {per} adds (+ {per // 2} removes) on one shared notebook")
    row("writes per second (process start included)", f"{writes / took:,.0f}/s", "-")
    row("entries kept / expected, versions", f"{len(kept)} / {len(expected)}, {row_['version']}", "all kept")
    assert set(kept) == expected and row_["version"] == writes


if __name__ == "__main__":
    print("(machine shared with other engineers: figures are noisy)")
    request_bytes()
    write_cost()
    concurrent()
