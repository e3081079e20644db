"""Search over past runs: ``session_search``'s query over 100,000 runs and 2,000,000 events (target
p50 <= 50 ms), and what keeping the index costs each event the Recorder writes (target <= 1 ms),
beside main before (no index) and beside this tree with the index triggers dropped.

The big store is generated straight into SQLite (runs and events with executemany in one
transaction, then ``runner.store.search.rebuild``) and cached at $RUNNER_BENCH_SEARCH_DB (default
/tmp/runner-bench-search/runner.db; ``--runs N`` other than 100,000: runner-N.db beside it);
delete it to regenerate.

main before (``$RUNNER_BENCH_BASE``, which has ``session_search`` and the index now) answers the
same queries on the same store (``_before.in_tree``; printed as not measured when it cannot open
it) and writes the same events with and without its triggers. The headline figures are printed
again in the common ``beside`` form with their floors, the same work with runner out of the way:
the query, a bare FTS5 ``MATCH`` on the same table with the same filters, the newest 5 rows; a
Recorder event, one bare ``sqlite3`` INSERT of the same event row, a transaction each; the index
maintenance, what a bare INSERT of the same text into an FTS5 table adds to it.

Run: python tests/bench/bench_search.py [--runs 100000]; quick: --runs 10000
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from _before import in_tree, or_reason, trees
from _common import beside, row

RUNS, EVENTS_PER_RUN, JOBS = 100_000, 20, 50
VERSION = "v3"  # bump when the generated data changes
CACHE = Path(os.environ.get("RUNNER_BENCH_SEARCH_DB", "/tmp/runner-bench-search/runner.db"))
WRITES = 2000  # events per Recorder measurement

# the events a run writes, in order (20): kinds the index keeps and kinds it skips
SHAPE = (
    ["run_started", "prompt"] + ["request", "response", "tool_call", "tool_result"] * 4 + ["response", "run_finished"]
)


def vocabulary(n: int = 20_000) -> list[str]:
    rng = random.Random(7)
    syllables = ["ka", "lo", "mi", "ne", "ru", "to", "sa", "vi", "de", "po", "an", "el", "or", "us", "ix", "qu"]
    words: set[str] = set()
    while len(words) < n:
        words.add("".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def texts(words: list[str], n: int, rng: random.Random) -> list[str]:
    """Zipf-distributed words: a few everywhere, most rare."""
    weights = [1 / (i + 1) for i in range(len(words))]
    out = []
    for _ in range(n):
        length = rng.choice((6, 12, 25, 60))
        out.append(" ".join(rng.choices(words, weights, k=length)))
    return out


def payload(kind: str, text: str, run_no: int, step: int) -> str:
    if kind == "prompt":
        value: dict[str, object] = {"system_chars": 900, "user": f"daily check {text}", "tools": ["terminal"]}
    elif kind == "response":
        value = {"iteration": step, "content": text if step % 2 else "", "tool_calls": [], "prompt_tokens": 900}
    elif kind == "tool_call":
        value = {"id": f"c{step}", "name": "terminal", "arguments": json.dumps({"command": f"grep {text[:40]}"})}
    elif kind == "tool_result":
        extra = f" serial{run_no}" if step == 6 else ""
        value = {"id": f"c{step}", "name": "terminal", "result": f"exit code 0 {text}{extra}", "chars": len(text)}
    else:
        value = {"iteration": step, "messages": step, "tools": 3}
    return json.dumps(value, separators=(",", ":"))


def generate(path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from runner.store import Store
    from runner.store.search import rebuild

    path.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    store = Store.open(path)
    rng = random.Random(11)
    pool = texts(vocabulary(), 20_000, rng)
    start = datetime(2026, 12, 1, tzinfo=UTC) - timedelta(days=365)
    step = timedelta(days=365) / RUNS
    started = time.perf_counter()
    trigger = store.one("SELECT sql FROM sqlite_master WHERE name='search_event_added'")
    assert trigger is not None
    store.execute("DROP TRIGGER search_event_added")
    with store.transaction() as conn:
        for base in range(0, RUNS, 5000):
            runs, events = [], []
            for run_no in range(base, base + 5000):
                at = start + step * run_no
                run_id = f"{at:%Y%m%d-%H%M%S}-{run_no:06x}"
                stamp = at.isoformat(timespec="milliseconds")
                runs.append((run_id, f"job-{run_no % JOBS}", "schedule", "succeeded", stamp, stamp, stamp))
                for seq, kind in enumerate(SHAPE, 1):
                    text = pool[rng.randrange(len(pool))]
                    events.append((run_id, seq, stamp, kind, payload(kind, text, run_no, seq)))
            conn.executemany(
                "INSERT INTO runs (id, job, trigger, status, created_at, started_at, ended_at) VALUES (?,?,?,?,?,?,?)",
                runs,
            )
            conn.executemany("INSERT INTO run_events (run_id, seq, ts, kind, payload) VALUES (?,?,?,?,?)", events)
    store.execute(trigger["sql"])
    written = time.perf_counter() - started
    started = time.perf_counter()
    done = rebuild(store)
    print(
        f"generated {RUNS:,} runs / {RUNS * EVENTS_PER_RUN:,} events in {written:.0f} s; "
        f"`runner db reindex` indexed {done.events:,} texts in {time.perf_counter() - started:.0f} s"
    )
    store.execute("CREATE TABLE IF NOT EXISTS bench_meta (version TEXT)")
    store.execute("INSERT INTO bench_meta VALUES (?)", (VERSION,))
    store.close()


def cached() -> Path:
    global CACHE
    if RUNS != 100_000:
        CACHE = CACHE.with_name(f"runner-{RUNS}.db")
    if CACHE.exists():
        import sqlite3

        try:
            got = sqlite3.connect(CACHE).execute("SELECT version FROM bench_meta").fetchone()
        except sqlite3.Error:
            got = None
        if got == (VERSION,):
            return CACHE
    print(f"generating {CACHE} (once; cached for the next runs) ...", flush=True)
    generate(CACHE)
    return CACHE


Query = tuple[str, "str | None", "datetime | None"]  # text, --job, --since


def queries(rng: random.Random) -> dict[str, list[Query]]:
    words = vocabulary()
    now = datetime(2026, 12, 1, tzinfo=UTC)
    week = now - timedelta(days=7)
    common, middle, rare = words[:5], words[200:400], words[15_000:16_000]
    n = range(30)
    return {
        "rare serial (1 run)": [(f"serial{rng.randrange(RUNS)}", None, None) for _ in n],
        "rare word": [(rng.choice(rare), None, None) for _ in n],
        "middle word": [(rng.choice(middle), None, None) for _ in n],
        "common word": [(rng.choice(common), None, None) for _ in n],
        "two words": [(f"{rng.choice(middle)} {rng.choice(common)}", None, None) for _ in n],
        "prefix": [(rng.choice(middle)[:4] + "*", None, None) for _ in n],
        "middle word, --job": [(rng.choice(middle), f"job-{rng.randrange(JOBS)}", None) for _ in n],
        "middle word, --since 7d": [(rng.choice(middle), None, week) for _ in n],
    }


def bench_queries(path: Path) -> None:
    """Each query once to warm the page cache, then timed; p50 over all classes, and per class."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from runner.store import Store
    from runner.store.search import Search, search

    store = Store.open(path, migrate=False)
    now = datetime(2026, 12, 1, tzinfo=UTC)
    every: list[float] = []
    for label, group in queries(random.Random(5)).items():
        times, found = [], 0
        for text, job, since in group:
            q = Search(text, job=job, since=since, limit=5)
            search(store, q, now=now)
            started = time.perf_counter()
            hits = search(store, q, now=now)
            times.append(time.perf_counter() - started)
            found += bool(hits)
        every += times
        print(
            f"  {label:<28} p50 {statistics.median(times) * 1000:7.1f} ms   max {max(times) * 1000:7.1f} ms"
            f"   ({found}/{len(group)} found)"
        )
    every.sort()
    size = f"{RUNS // 1000}k runs, {RUNS * EVENTS_PER_RUN / 1e6:g}M events"
    row(f"session_search query p50 ({size})", f"{statistics.median(every) * 1000:.1f} ms", "<= 50 ms")
    row("session_search query p99", f"{every[int(len(every) * 0.99)] * 1000:.1f} ms", "(printed)")
    store.close()
    measured = trees()
    before = or_reason(measured[1], lambda: in_tree(measured[1], "bench_search", "query_ms", str(path), RUNS)) if len(measured) > 1 else None  # fmt: skip
    floor = bare_match_ms(path)
    for at, label, target in ((50, "p50", "<= 50 ms"), (99, "p99", "")):
        then = before[label] if isinstance(before, dict) else before
        beside(f"session_search query {label} ({size})", nearest(every, at), then, nearest(floor, at),
               "a bare FTS5 MATCH on the same table, same filters, newest 5", target)  # fmt: skip


def nearest(ordered: list[float], at: float) -> float:
    """The ``at``-th percentile of sorted seconds, in ms."""
    return ordered[min(len(ordered) - 1, int(len(ordered) * at / 100))] * 1000


def query_ms(path: str, runs: int) -> dict[str, float]:
    """p50 and p99 (ms) of every query class, run by the tree under test (``_before.in_tree``)."""
    global RUNS
    RUNS = runs
    from runner.store import Store
    from runner.store.search import Search, search

    store = Store.open(Path(path), migrate=False)
    now = datetime(2026, 12, 1, tzinfo=UTC)
    every = []
    for group in queries(random.Random(5)).values():
        for text, job, since in group:
            q = Search(text, job=job, since=since, limit=5)
            search(store, q, now=now)
            started = time.perf_counter()
            search(store, q, now=now)
            every.append(time.perf_counter() - started)
    store.close()
    every.sort()
    return {"p50": nearest(every, 50), "p99": nearest(every, 99)}


def bare_match_ms(path: Path) -> list[float]:
    """Seconds of each query as a bare FTS5 MATCH (see the module doc), sorted."""
    import sqlite3

    conn = sqlite3.connect(path)
    out = []
    for group in queries(random.Random(5)).values():
        for text, job, since in group:
            expr = " ".join('"' + w.rstrip("*") + '"' + ("*" if w.endswith("*") else "") for w in text.split())
            where, params = ["search_fts MATCH ?"], [expr]
            if job:
                where.append("d.job = ?")
                params.append(job)
            if since:
                where.append("d.ts >= ?")
                params.append(since.isoformat())
            sql = (
                "SELECT d.run_id FROM search_fts JOIN search_docs d ON d.id = search_fts.rowid "
                f"WHERE {' AND '.join(where)} ORDER BY search_fts.rowid DESC LIMIT 5"
            )
            conn.execute(sql, params).fetchall()
            started = time.perf_counter()
            conn.execute(sql, params).fetchall()
            out.append(time.perf_counter() - started)
    conn.close()
    return sorted(out)


# runs in the tree under test (this one or main before): no import of this folder's helpers
WRITER = r"""
import sys, time, json
from pathlib import Path
from runner.store import Store
from runner.store.runs import Recorder
from runner.store import ledger
from runner.safety.redact import Redactor
from runner.events import Event, Request, Response, ToolCall, ToolResult
path, n, mode = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
store = Store.open(path)
saved = store.one("SELECT sql FROM sqlite_master WHERE name='search_event_added'")
if mode.startswith("drop") and saved:
    store.execute("DROP TRIGGER search_event_added")
run_id = ledger.open_run(store, job="bench", trigger="manual")
rec = Recorder(store, run_id, Redactor())
text = " ".join(f"word{i % 97} line {i}" for i in range(120))
items = []
for i in range(n):
    kind = (Event.REQUEST, Event.RESPONSE, Event.TOOL_CALL, Event.TOOL_RESULT)[i % 4]
    if kind == Event.TOOL_RESULT:
        items.append((kind, ToolResult(f"c{i}", "terminal", text[: 200 + (i * 37) % 1800], 2000, False, 0.1)))
    elif kind == Event.TOOL_CALL:
        items.append((kind, ToolCall(f"c{i}", "terminal", json.dumps({"command": f"grep -r w{i}"}))))
    elif kind == Event.RESPONSE:
        items.append((kind, Response(i, text[:300], [], "stop", 900, 10, 0.0, 0.1)))
    else:
        items.append((kind, Request(i, i, 3)))
started = time.perf_counter()
for kind, payload in items:
    rec(kind, payload)
print((time.perf_counter() - started) / n * 1e6)
if mode.endswith("restore"):  # the cached big store: leave it as it was
    store.execute("DELETE FROM run_events WHERE run_id=?", (run_id,))
    store.execute("DELETE FROM runs WHERE id=?", (run_id,))
    if mode.startswith("drop") and saved:
        store.execute(saved["sql"])
"""


def write_cost(python: str, env: dict[str, str], db: Path, mode: str) -> float:
    """Microseconds per event of WRITES Recorder calls in a fresh process of the tree."""
    res = subprocess.run([python, "-c", WRITER, str(db), str(WRITES), mode], env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"writer failed: {res.stderr[-800:]}")
    return float(res.stdout.strip().splitlines()[-1])


def bench_writes(big: Path) -> None:
    """Microseconds per Recorder event, medians of alternating rounds (the first round dropped)."""
    measured = trees()
    here = measured[0]
    variants = [(t.name, t, "keep") for t in measured] + [(f"{t.name}, index triggers dropped", t, "drop") for t in measured]  # fmt: skip
    per: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(6):
            for i, (name, tree, mode) in enumerate(variants):
                value = write_cost(tree.python, tree.env(), Path(tmp) / f"{round_}-{i}.db", mode)
                if round_:
                    per[name].append(value)
    med = {name: statistics.median(values) for name, values in per.items()}
    for name, value in med.items():
        row(f"Recorder event, fresh store: {name}", f"{value:.0f} us", "(printed)")
    dropped = "this tree, index triggers dropped"
    row("index maintenance per event (fresh store)", f"{med['this tree'] - med[dropped]:.0f} us", "<= 1000 us")
    if "main before" in med:
        row("this tree minus main before, per event", f"{med['this tree'] - med['main before']:.0f} us", "<= 1000 us")
    big_per: dict[str, list[float]] = {"keep-restore": [], "drop-restore": []}
    for _ in range(3):
        for mode in big_per:
            big_per[mode].append(write_cost(here.python, here.env(), big, mode))
    with_index, without = (statistics.median(v) for v in big_per.values())
    big_events = f"{RUNS * EVENTS_PER_RUN / 1e6:g}M-event"
    row(f"Recorder event, {big_events} store, with the index", f"{with_index:.0f} us", "(printed)")
    row(f"Recorder event, {big_events} store, triggers dropped", f"{without:.0f} us", "(printed)")
    row(f"index maintenance per event ({big_events} store)", f"{with_index - without:.0f} us", "<= 1000 us")
    plain, indexed = bare_insert_us()
    before = "main before" in med
    beside("Recorder event, fresh store", med["this tree"], med["main before"] if before else None, plain,
           "one bare sqlite3 INSERT of the event row, a transaction each", "", "µs")  # fmt: skip
    beside("index maintenance per event, fresh store", med["this tree"] - med[dropped],
           med["main before"] - med["main before, index triggers dropped"] if before else None, indexed - plain,
           "what a bare FTS5 INSERT of the same texts adds to it", "<= 1000 µs", "µs")  # fmt: skip


def bare_insert_us() -> tuple[float, float]:
    """Microseconds per event row inserted with bare sqlite3, a transaction each: alone, and with its
    text also inserted into an FTS5 table when the index keeps its kind (medians of 3 rounds of WRITES)."""
    import sqlite3

    text = " ".join(f"word{i % 97} line {i}" for i in range(120))
    rounds: dict[bool, list[float]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(3):
            for fts in (False, True):
                conn = sqlite3.connect(Path(tmp) / f"{n}-{fts}.db", isolation_level=None)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.execute("CREATE TABLE events (run_id TEXT, seq INT, kind TEXT, payload TEXT)")
                conn.execute("CREATE VIRTUAL TABLE fts USING fts5(body)")
                started = time.perf_counter()
                for i in range(WRITES):  # the WRITER's events: a request (not indexed), a response, a call, a result
                    body = ("", text[:300], f"grep -r w{i}", text[: 200 + (i * 37) % 1800])[i % 4]
                    conn.execute("BEGIN")
                    conn.execute("INSERT INTO events VALUES ('r', ?, 'event', ?)", (i, body))
                    if fts and body:
                        conn.execute("INSERT INTO fts (rowid, body) VALUES (?, ?)", (i, body))
                    conn.execute("COMMIT")
                rounds[fts].append((time.perf_counter() - started) / WRITES * 1e6)
                conn.close()
    return statistics.median(rounds[False]), statistics.median(rounds[True])


def main() -> None:
    global RUNS
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=RUNS, help="runs in the generated store (20 events each)")
    RUNS = parser.parse_args().runs
    print("machine shared with other work: figures are medians of alternating rounds")
    big = cached()
    bench_queries(big)
    bench_writes(big)


if __name__ == "__main__":
    main()
