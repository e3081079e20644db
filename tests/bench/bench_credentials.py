"""Credential pool: key selection with shared state, overhead per model request.

One request's pool work is ``current()`` (a BEGIN IMMEDIATE read-pick-count transaction on
runner.db) plus ``succeeded()`` (one more). Measured on a real SQLite file, 10 keys:
  - steady: a run's sticky key, request after request;
  - new run: building a run's pool (row sync) and its first pick;
  - contended: the steady case while two other processes do the same on the same file.
Target: median <= 2 ms per request.

Main before: the same figures from main before's tree (``_before.each_tree``). Floor: bare
``sqlite3`` on a WAL file with a 10-row key table: a BEGIN IMMEDIATE transaction with one
``SELECT`` (the pick) and one with one ``UPDATE`` (the count), what a request's two store
transactions cost SQLite itself.

    python tests/bench/bench_credentials.py [--requests N]
"""

from __future__ import annotations

import argparse
import multiprocessing
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _before import each_tree  # noqa: E402
from _common import beside  # noqa: E402

from runner.agent.credentials import CredentialPool  # noqa: E402
from runner.agent.keys import Credential  # noqa: E402
from runner.store import Store  # noqa: E402

TARGET_MS = 2.0
CREDS = [Credential(f"KEY_{i}", f"bench-key-{i}-0123456789abcdef") for i in range(10)]


def per_request(store: Store, n: int, strategy: str = "least_used") -> list[float]:
    pool = CredentialPool(store, "bench", CREDS, strategy=strategy)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        cred = pool.current()
        pool.succeeded(cred)
        times.append((time.perf_counter() - t0) * 1000)
    return times


def new_runs(store: Store, n: int) -> list[float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        pool = CredentialPool(store, "bench", CREDS, strategy="round_robin")
        pool.succeeded(pool.current())
        times.append((time.perf_counter() - t0) * 1000)
    return times


def _hammer(path: str, stop_at: float) -> None:
    store = Store.open(Path(path))
    pool = CredentialPool(store, "bench", CREDS, strategy="least_used")
    while time.time() < stop_at:
        pool.succeeded(pool.current())


def _total(store: Store) -> int:
    row = store.one("SELECT SUM(request_count) AS n FROM credentials")
    return int(row["n"] or 0) if row else 0


def report(name: str, times: list[float]) -> None:
    times = sorted(times)
    med = statistics.median(times)
    p95 = times[int(len(times) * 0.95) - 1]
    ok = "ok" if med <= TARGET_MS else "OVER TARGET"
    print(f"{name:<34} median {med:6.3f} ms   p95 {p95:6.3f} ms   (target median <= {TARGET_MS} ms: {ok})")


def floor(n: int, sync: bool = False) -> list[float]:
    """Milliseconds per request of two bare sqlite3 transactions: pick (one SELECT), count (one
    UPDATE); with ``sync``, the pick's transaction first inserts the 10 keys (ignored when there)."""
    with tempfile.TemporaryDirectory() as tmp:
        conn = sqlite3.connect(Path(tmp) / "floor.db", isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("CREATE TABLE keys (name TEXT PRIMARY KEY, request_count INT NOT NULL DEFAULT 0)")
        conn.executemany("INSERT INTO keys (name) VALUES (?)", [(c.label,) for c in CREDS])
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            if sync:
                conn.executemany("INSERT OR IGNORE INTO keys (name) VALUES (?)", [(c.label,) for c in CREDS])
            name = conn.execute("SELECT name FROM keys ORDER BY request_count LIMIT 1").fetchone()[0]
            conn.execute("COMMIT")
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("UPDATE keys SET request_count = request_count + 1 WHERE name = ?", (name,))
            conn.execute("COMMIT")
            times.append((time.perf_counter() - t0) * 1000)
        conn.close()
    return times


def measure(n: int) -> dict[str, list[float]]:
    """Milliseconds per request: steady (a sticky key) and a new run's first pick."""
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(Path(tmp) / "runner.db")
        per_request(store, 200)  # warm up
        found = {"steady": per_request(store, n), "new run": new_runs(store, max(1, n * 3 // 20))}
        store.close()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    n = parser.parse_args().requests
    measured = each_tree("bench_credentials", "measure", n)
    here, before = measured["this tree"], measured.get("main before")
    report(f"steady (sticky key), {n} requests", here["steady"])
    report(f"new run (sync + first pick), {len(here['new run'])}", here["new run"])
    for name, sync, what in (
        ("steady", False, "bare sqlite3: a SELECT and an UPDATE, 2 transactions"),
        ("new run", True, "the same, the first also inserting the 10 keys"),
    ):
        beside(
            f"{name}, median per request",
            statistics.median(here[name]),
            before and statistics.median(before[name]),
            statistics.median(floor(len(here[name]), sync)),
            what,
            f"<= {TARGET_MS} ms",
        )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "runner.db"
        store = Store.open(path)
        per_request(store, 200)  # warm up
        stop_at = time.time() + 6
        ctx = multiprocessing.get_context("spawn")
        others = [ctx.Process(target=_hammer, args=(str(path), stop_at)) for _ in range(2)]
        for p in others:
            p.start()
        time.sleep(1.5)  # let them start and reach the loop
        counted = _total(store)
        times = per_request(store, max(1, n // 2))
        others_did = _total(store) - counted - len(times)
        report(f"contended (2 other processes), {len(times)}", times)
        print(f"{'':<34} (the other processes made {others_did} requests meanwhile)")
        for p in others:
            p.join()
        store.close()


if __name__ == "__main__":
    main()
