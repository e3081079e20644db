"""Fleet budgets: what a reservation costs a run, and 16 processes x 1,000 runs never passing a cap.

1. Reserve (one BEGIN IMMEDIATE: the caps' totals read, the reservation row and its totals written)
   and settle (joined to ``ledger.finish``'s transaction) on a real runner.db holding 20,000 settled
   runs, fleet + provider + job caps set. Target: reservation <= 2 ms per run (median).
2. 16 real processes, each 1,000 runs (ledger row, reservation, cost, final status) against
   fleet, provider and job caps, while a 17th process samples the totals: no committed state and
   no final total passes a cap.

Main before (826e01d) has no budgets: a run reserves nothing and nothing is checked (n/a).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench._common import row  # noqa: E402


def reservation_cost(tmp: Path, history: int = 20_000, samples: int = 2_000) -> None:
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
    reserves.sort()
    settles.sort()
    ms = 1000
    print(f"reservation on a store with {history:,} settled runs, {samples:,} samples, 4 caps (fleet, provider, job)")
    row("reserve: median", f"{statistics.median(reserves) * ms:.3f} ms", "<= 2 ms (main before: n/a)")
    row("reserve: p99", f"{reserves[int(len(reserves) * 0.99)] * ms:.3f} ms", "-")
    row("ledger.finish with settle: median", f"{statistics.median(settles) * ms:.3f} ms", "-")
    row("ledger.finish without a reservation: median", f"{statistics.median(plain) * ms:.3f} ms", "-")
    store.close()


def fleet(tmp: Path, processes: int = 16, runs: int = 1_000) -> None:
    from tests.store.test_budget import CAP_USD, run_fleet

    start = time.perf_counter()
    ran, refused, samples = run_fleet(tmp / "fleet.db", processes, runs, scale=0.004)
    took = time.perf_counter() - start
    from runner.store import Store
    from runner.store.budget import totals

    store = Store.open(tmp / "fleet.db")
    spent = {(t["scope"], t["name"], t["period"]): t["spent_usd"] for t in totals(store)}
    print(
        f"\n{processes} processes x {runs:,} runs of $0.0002 to $0.002 (caps: fleet ${CAP_USD}/day, provider p ${CAP_USD * 0.8}/day, "
        f"each job ${CAP_USD * 0.6}/month)"
    )
    row("runs that ran / skipped by a cap", f"{ran:,} / {refused:,}", "-")
    row("fleet spent today", f"${spent[('fleet', '', 'day')]:.4f}", f"<= ${CAP_USD:.2f}")
    row("provider p spent today", f"${spent[('provider', 'p', 'day')]:.4f}", f"<= ${CAP_USD * 0.8:.2f}")
    for job in ("a", "b", "c"):
        row(f"job {job} spent this month", f"${spent.get(('job', job, 'month'), 0.0):.4f}", f"<= ${CAP_USD * 0.6:.2f}")
    row("states sampled while running, over a cap", f"0 of {samples:,}", "0 (main before: no caps)")
    row("runs per second (all processes)", f"{(ran + refused) / took:,.0f}", "-")
    assert spent[("fleet", "", "day")] <= CAP_USD


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        reservation_cost(Path(tmp))
        fleet(Path(tmp))


if __name__ == "__main__":
    main()
