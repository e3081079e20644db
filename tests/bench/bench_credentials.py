"""Credential pool: key selection with shared state, overhead per model request.

One request's pool work is ``current()`` (a BEGIN IMMEDIATE read-pick-count transaction on
runner.db) plus ``succeeded()`` (one more). Measured on a real SQLite file, 10 keys:
  - steady: a run's sticky key, request after request;
  - new run: building a run's pool (row sync) and its first pick;
  - contended: the steady case while two other processes do the same on the same file.
Target: median <= 2 ms per request.

    python tests/bench/bench_credentials.py
"""

from __future__ import annotations

import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

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


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "runner.db"
        store = Store.open(path)
        per_request(store, 200)  # warm up
        report("steady (sticky key), 2000 requests", per_request(store, 2000))
        report("new run (sync + first pick), 300", new_runs(store, 300))
        stop_at = time.time() + 6
        ctx = multiprocessing.get_context("spawn")
        others = [ctx.Process(target=_hammer, args=(str(path), stop_at)) for _ in range(2)]
        for p in others:
            p.start()
        time.sleep(1.5)  # let them start and reach the loop
        before = _total(store)
        times = per_request(store, 1000)
        others_did = _total(store) - before - 1000
        report("contended (2 other processes), 1000", times)
        print(f"{'':<34} (the other processes made {others_did} requests meanwhile)")
        for p in others:
            p.join()
        store.close()


if __name__ == "__main__":
    main()
