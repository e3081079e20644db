"""Fleet budgets: what a reservation costs a run, and 16 processes x 1,000 runs never passing a cap.

1. Reserve (one BEGIN IMMEDIATE: the caps' totals read, the reservation row and its totals written)
   and settle (joined to ``ledger.finish``'s transaction) on a real runner.db holding 20,000 settled
   runs, fleet + provider + job caps set. Target: reservation <= 2 ms per run (median).
2. 16 real processes, each 1,000 runs (ledger row, reservation, cost, final status) against
   fleet, provider and job caps, while a 17th process samples the totals: no committed state and
   no final total passes a cap.

Main before: both parts from main before's tree (``_before.each_tree``; it has budgets since
issue 27). Floor of a reservation: bare ``sqlite3``, one BEGIN IMMEDIATE transaction reading four
totals rows, inserting a reservation row and updating the four totals (the rows a reservation
writes, without runner). The fleet's over-cap count has no floor (0 is the only right answer).

    python tests/bench/bench_budget.py [--history N] [--samples N] [--processes N] [--runs N]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _before import each_tree  # noqa: E402
from _common import beside, row  # noqa: E402


def reservation_floor(samples: int) -> list[float]:
    """Seconds per bare sqlite3 reservation: read 4 totals, insert a row, update the 4 totals."""
    with tempfile.TemporaryDirectory() as tmp:
        conn = sqlite3.connect(Path(tmp) / "floor.db", isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("CREATE TABLE totals (scope TEXT, name TEXT, period TEXT, spent INT, held INT, PRIMARY KEY (scope, name, period))")
        conn.execute("CREATE TABLE holds (run_id TEXT PRIMARY KEY, micro INT)")
        keys = [("fleet", "", "day"), ("fleet", "", "month"), ("provider", "p", "day"), ("job", "j", "month")]
        conn.executemany("INSERT INTO totals VALUES (?, ?, ?, 0, 0)", keys)
        out = []
        for i in range(samples):
            start = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("SELECT spent + held FROM totals").fetchall()
            conn.execute("INSERT INTO holds VALUES (?, 1000)", (f"r{i}",))
            conn.executemany("UPDATE totals SET held = held + 1000 WHERE scope = ? AND name = ? AND period = ?", keys)
            conn.execute("COMMIT")
            out.append(time.perf_counter() - start)
        conn.close()
    return out


def reservation_cost(history: int = 20_000, samples: int = 2_000) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as tmp:
        return _reservation_cost(Path(tmp), history, samples)


def _reservation_cost(tmp: Path, history: int, samples: int) -> dict[str, list[float]]:
    from runner.statuses import RunStatus, Trigger
    from runner.store import Store, ledger
    from runner.store.budget import Hold, reserve, settle, to_micro
    from tests.store.test_budget import caps

    store = Store.open(tmp / "runner.db")
    with store.transaction():  # a month of history
        for i in range(history):
            run_id = ledger.open_run(store, job="j", trigger=Trigger.MANUAL, run_id=f"h{i}")
            assert reserve(store, Hold(run_id, "j", ("p",), 0, caps())) is None
            settle(store, run_id)
    reserves, settles, plain = [], [], []
    for _ in range(samples):
        run_id = ledger.open_run(store, job="j", trigger=Trigger.MANUAL)
        start = time.perf_counter()
        refusal = reserve(store, Hold(run_id, "j", ("p",), to_micro(0.001), caps()))
        reserves.append(time.perf_counter() - start)
        assert refusal is None
        ledger.set_fields(store, run_id, cost_usd=0.0005)
        start = time.perf_counter()
        ledger.finish(store, run_id, RunStatus.SUCCEEDED)
        settles.append(time.perf_counter() - start)
        other = ledger.open_run(store, job="j", trigger=Trigger.MANUAL)  # a run with no reservation: ledger.finish alone
        start = time.perf_counter()
        ledger.finish(store, other, RunStatus.SUCCEEDED)
        plain.append(time.perf_counter() - start)
    store.close()
    return {"reserves": sorted(reserves), "settles": sorted(settles), "plain": plain}


def show_reservation(history: int, samples: int, here: dict, before: dict | None) -> None:
    reserves, settles, plain = here["reserves"], here["settles"], here["plain"]
    ms = 1000
    print(f"reservation on a store with {history:,} settled runs, {samples:,} samples, 4 caps (fleet, provider, job)")
    row("reserve: median", f"{statistics.median(reserves) * ms:.3f} ms", "<= 2 ms")
    row("reserve: p99", f"{reserves[int(len(reserves) * 0.99)] * ms:.3f} ms", "-")
    row("ledger.finish with settle: median", f"{statistics.median(settles) * ms:.3f} ms", "-")
    row("ledger.finish without a reservation: median", f"{statistics.median(plain) * ms:.3f} ms", "-")
    beside("reserve, median", statistics.median(reserves) * ms, before and statistics.median(before["reserves"]) * ms,
           statistics.median(reservation_floor(samples)) * ms, "bare sqlite3: read 4 totals, insert a hold, update 4", "<= 2 ms")


def fleet(processes: int = 16, runs: int = 1_000) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        return _fleet(Path(tmp), processes, runs)


def _fleet(tmp: Path, processes: int, runs: int) -> dict[str, object]:
    from tests.store.test_budget import run_fleet

    start = time.perf_counter()
    ran, refused, samples = run_fleet(tmp / "fleet.db", processes, runs, scale=0.004)
    took = time.perf_counter() - start
    from runner.store import Store
    from runner.store.budget import totals

    store = Store.open(tmp / "fleet.db")
    spent = {"|".join((t["scope"], t["name"], t["period"])): t["spent_usd"] for t in totals(store)}
    store.close()
    return {"ran": ran, "refused": refused, "samples": samples, "took": took, "spent": spent}


def show_fleet(processes: int, runs: int, here: dict, before: dict | None) -> None:
    from tests.store.test_budget import CAP_USD

    ran, refused, samples, took = here["ran"], here["refused"], here["samples"], here["took"]
    spent = {tuple(k.split("|")): v for k, v in here["spent"].items()}
    print(
        f"\n{processes} processes x {runs:,} runs of $0.0002 to $0.002 (caps: fleet ${CAP_USD}/day, provider p ${CAP_USD * 0.8}/day, "
        f"each job ${CAP_USD * 0.6}/month)"
    )
    row("runs that ran / skipped by a cap", f"{ran:,} / {refused:,}", "-")
    row("fleet spent today", f"${spent[('fleet', '', 'day')]:.4f}", f"<= ${CAP_USD:.2f}")
    row("provider p spent today", f"${spent[('provider', 'p', 'day')]:.4f}", f"<= ${CAP_USD * 0.8:.2f}")
    for job in ("a", "b", "c"):
        row(f"job {job} spent this month", f"${spent.get(('job', job, 'month'), 0.0):.4f}", f"<= ${CAP_USD * 0.6:.2f}")
    row("states sampled while running, over a cap", f"0 of {samples:,}", "0")
    row("runs per second (all processes)", f"{(ran + refused) / took:,.0f}", "-")
    assert spent[("fleet", "", "day")] <= CAP_USD
    beside("fleet: states sampled over a cap", f"0 of {samples:,}", before and f"0 of {before['samples']:,}",
           "n/a (a count; 0 is right)", "", "0", "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", type=int, default=20_000)
    parser.add_argument("--samples", type=int, default=2_000)
    parser.add_argument("--processes", type=int, default=16)
    parser.add_argument("--runs", type=int, default=1_000)
    args = parser.parse_args()
    reservation = each_tree("bench_budget", "reservation_cost", args.history, args.samples)
    show_reservation(args.history, args.samples, reservation["this tree"], reservation.get("main before"))
    found = each_tree("bench_budget", "fleet", args.processes, args.runs)
    show_fleet(args.processes, args.runs, found["this tree"], found.get("main before"))


if __name__ == "__main__":
    main()
