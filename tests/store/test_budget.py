"""The budget ledger on a real SQLite file: reservations checked against every cap in one
transaction, settled by ``ledger.finish`` and by the recovery of lost runs, and 16 real processes
reserving and settling at once never pass a cap."""

from __future__ import annotations

import multiprocessing
import queue
import random
import sqlite3
import time
from pathlib import Path

import pytest

from runner.statuses import RunStatus, Trigger
from runner.store import Store, ledger
from runner.store.budget import (
    BudgetUnavailable,
    Cap,
    Hold,
    Period,
    Scope,
    open_reservations,
    reserve,
    to_micro,
    totals,
)

CAP_USD = 5.0


def caps(job: str = "j", provider: str = "p") -> tuple[Cap, ...]:
    return (
        Cap(Scope.FLEET, "", Period.DAY, to_micro(CAP_USD)),
        Cap(Scope.FLEET, "", Period.MONTH, to_micro(CAP_USD * 3)),
        Cap(Scope.PROVIDER, provider, Period.DAY, to_micro(CAP_USD * 0.8)),
        Cap(Scope.JOB, job, Period.MONTH, to_micro(CAP_USD * 0.6)),
    )


def one_run(store: Store, amount: float, cost: float, *, job: str = "j", providers=("p",)) -> bool:
    """A run's budget life: ledger row, reservation, its real cost, final status. True: it ran."""
    run_id = ledger.open_run(store, job=job, trigger=Trigger.MANUAL)
    refusal = reserve(store, Hold(run_id, job, providers, to_micro(amount), caps(job)))
    if refusal is not None:
        ledger.finish(store, run_id, RunStatus.SKIPPED, reason="budget", error=refusal.describe())
        return False
    ledger.set_fields(store, run_id, cost_usd=cost)
    ledger.finish(store, run_id, RunStatus.SUCCEEDED)
    return True


def by_key(store: Store) -> dict[tuple[str, str, str], tuple[float, float]]:
    return {(t["scope"], t["name"], t["period"]): (t["spent_usd"], t["reserved_usd"]) for t in totals(store)}


def test_reserve_settle_and_refuse(tmp_path: Path):
    store = Store.open(tmp_path / "runner.db")
    assert one_run(store, 1.0, 0.4) and one_run(store, 1.0, 0.25)
    t = by_key(store)
    assert t[("fleet", "", "day")] == (0.65, 0.0) and t[("job", "j", "month")] == (0.65, 0.0)
    assert t[("provider", "p", "day")] == (0.65, 0.0)
    # the job's monthly cap is $3.00: 0.65 spent + 2.5 would pass it
    run_id = ledger.open_run(store, job="j", trigger=Trigger.MANUAL)
    refusal = reserve(store, Hold(run_id, "j", ("p",), to_micro(2.5), caps()))
    assert refusal is not None and refusal.cap.scope == Scope.JOB and refusal.cap.period == Period.MONTH
    assert "job j monthly cap $3.00" in refusal.describe() and "spent $0.65" in refusal.describe()
    assert open_reservations(store) == []
    # an open reservation counts against the caps until it is settled
    assert reserve(store, Hold(run_id, "j", ("p",), to_micro(2.0), caps())) is None
    [held] = open_reservations(store)
    assert held["run_id"] == run_id and held["reserved_usd"] == 2.0
    other = ledger.open_run(store, job="k", trigger=Trigger.MANUAL)
    refused = reserve(store, Hold(other, "k", ("p",), to_micro(1.5), caps("k")))
    assert refused is not None and refused.cap.scope == Scope.PROVIDER  # 0.65 + 2.0 + 1.5 > 4.0
    ledger.finish(store, run_id, RunStatus.FAILED, reason="x")  # no cost recorded and no events: $0
    assert by_key(store)[("fleet", "", "day")] == (0.65, 0.0)


def test_a_lost_run_is_settled_at_recovery_with_what_its_events_recorded(tmp_path: Path):
    from runner.events import Event, Response, SideCall
    from runner.safety.redact import Redactor
    from runner.store import ledger
    from runner.store.runs import Recorder

    store = Store.open(tmp_path / "runner.db")
    run_id = ledger.open_run(store, job="j", trigger=Trigger.MANUAL)
    assert reserve(store, Hold(run_id, "j", ("p",), to_micro(1.0), caps())) is None
    emit = Recorder(store, run_id, Redactor())
    emit(Event.RESPONSE, Response(1, "", [], "stop", 10, 10, cost_usd=0.3, seconds=1))
    emit(Event.SUMMARY, SideCall("m", "aux", 10, 10, cost_usd=0.05))
    store.execute("UPDATE runs SET pid=999999999, pid_start=NULL WHERE id=?", (run_id,))  # its process is gone
    assert ledger.recover_orphans(store) == [run_id]
    t = by_key(store)
    assert t[("fleet", "", "day")] == (0.35, 0.0)
    assert t[("provider", "p", "day")] == (0.3, 0.0) and t[("provider", "aux", "day")] == (0.05, 0.0)
    assert open_reservations(store) == []


def test_a_reservation_that_cannot_be_written_raises(tmp_path: Path):
    store = Store.open(tmp_path / "runner.db")
    store.execute(
        "CREATE TRIGGER no_budget BEFORE INSERT ON budget_runs BEGIN SELECT RAISE(ABORT, 'disk says no'); END"
    )
    run_id = ledger.open_run(store, job="j", trigger=Trigger.MANUAL)
    with pytest.raises(BudgetUnavailable, match="disk says no"):
        reserve(store, Hold(run_id, "j", ("p",), to_micro(1.0), caps()))
    assert by_key(store) == {}


def _worker(path: str, seed: int, runs: int, scale: float, out: multiprocessing.Queue) -> None:
    rng = random.Random(seed)
    store = Store.open(Path(path), migrate=False)
    ran = refused = 0
    for _ in range(runs):
        amount = rng.choice([0.05, 0.1, 0.2, 0.5]) * scale
        job = rng.choice(["a", "b", "c"])
        if one_run(store, amount, round(amount * rng.random(), 6), job=job, providers=(rng.choice(["p", "q"]),)):
            ran += 1
        else:
            refused += 1
    out.put((ran, refused))


def _sampler(path: str, stop, out: multiprocessing.Queue) -> None:
    """Reads the totals while the workers write: every committed state keeps settled + open under each cap."""
    db = sqlite3.connect(path, timeout=30)
    worst, samples = 0, 0
    while not stop.is_set():
        for scope, name, cap in (("fleet", "", CAP_USD), ("provider", "p", CAP_USD * 0.8), ("job", "a", CAP_USD * 0.6)):
            row = db.execute(
                "SELECT settled_micro + open_micro FROM budget_totals WHERE scope=? AND name=? AND length(period)=10",
                (scope, name),
            ).fetchone()
            if row and row[0] > to_micro(cap):
                worst = max(worst, row[0])
        samples += 1
    out.put((worst, samples))


def collect(out: multiprocessing.Queue, procs: list) -> tuple[int, int]:
    """The next worker's result; fails at once when a worker died without one (not after minutes)."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        try:
            return out.get(timeout=0.5)
        except queue.Empty:
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            assert not dead, f"a worker process failed (exit codes {dead}); its traceback is in the captured stderr"
    raise AssertionError("the workers gave no result in 4 minutes")


def run_fleet(path: Path, processes: int, runs: int, scale: float = 1.0) -> tuple[int, int, int]:
    """``processes`` real processes, each ``runs`` reserve-and-settle cycles of $0.05 to $0.50 times
    ``scale``; returns (ran, refused, samples)."""
    Store.open(path).close()
    ctx = multiprocessing.get_context("fork")
    out: multiprocessing.Queue = ctx.Queue()
    stop = ctx.Event()
    sampler = ctx.Process(target=_sampler, args=(str(path), stop, out))
    sampler.start()
    procs = [ctx.Process(target=_worker, args=(str(path), i, runs, scale, out)) for i in range(processes)]
    for p in procs:
        p.start()
    results = [collect(out, procs) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    stop.set()
    worst, samples = out.get(timeout=60)
    sampler.join(timeout=60)
    assert worst == 0, f"a committed state passed a cap: {worst / 1e6}"
    return sum(r for r, _ in results), sum(f for _, f in results), samples


def test_sixteen_processes_never_pass_a_cap(tmp_path: Path):
    path = tmp_path / "runner.db"
    ran, refused, samples = run_fleet(path, 16, 40)
    assert ran + refused == 16 * 40 and refused > 0 and ran > 0 and samples > 0
    store = Store.open(path)
    t = by_key(store)
    assert t[("fleet", "", "day")][1] == 0 and open_reservations(store) == []
    assert t[("fleet", "", "day")][0] <= CAP_USD and t[("provider", "p", "day")][0] <= CAP_USD * 0.8
    settled = store.one("SELECT SUM(cost_micro) AS s, COUNT(*) AS n FROM budget_runs WHERE state='settled'")
    assert settled is not None and settled["n"] == ran and to_micro(t[("fleet", "", "day")][0]) == settled["s"]
    skipped = store.one("SELECT COUNT(*) AS n FROM runs WHERE status='skipped' AND reason='budget'")
    assert skipped is not None and skipped["n"] == refused
