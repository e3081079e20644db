"""Bursts with a real serve: many slots due at the same instant. The jobs' stored state is seeded
so every slot falls on one instant a few seconds ahead (no waiting for a minute boundary)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from runner.serve.planner import JobState
from runner.serve.state import save_sight
from tests.servehelp import rows, serve_factory, ts, wait_for, write_config

MS = timedelta(milliseconds=1)  # the ledger keeps milliseconds


@pytest.fixture
def serve(project):
    yield from serve_factory(project)


def burst(project, count: int, pre_run: str, lead: float) -> datetime:
    """``count`` script-only jobs, every one with a slot at the returned instant."""
    project.write_jobs(
        "jobs:\n"
        + "".join(
            f"  j{i:03d}:\n    schedule: every 3600s\n    agent: false\n    pre_run: {pre_run}\n" for i in range(count)
        )
    )
    t0 = (datetime.now(UTC) + timedelta(seconds=lead)).replace(microsecond=0)
    store = project.open_store()
    for i in range(count):
        state = JobState(
            f"j{i:03d}",
            "every 3600s",
            first_seen=t0 - timedelta(days=1),
            last_slot=t0 - timedelta(hours=1),
            resolved_at=t0,
        )
        save_sight(store, state)
    store.close()
    return t0


def sleep_until(t: datetime) -> None:
    time.sleep(max(0.0, (t - datetime.now(UTC)).total_seconds()))


def ended(project, count: int):
    done = rows(project.home, "SELECT * FROM runs WHERE ended_at IS NOT NULL")
    return done if len(done) >= count else None


def test_a_burst_is_one_transaction_with_every_slot_once(project, serve):
    write_config(project, max_parallel=8)
    t0 = burst(project, 120, "'true'", lead=5)
    daemon = serve().started()
    db = project.db(timeout=30)
    seen: set[int] = set()
    deadline = time.monotonic() + 30
    while 120 not in seen and time.monotonic() < deadline:  # a reader looks as fast as it can
        seen.add(db.execute("SELECT COUNT(*) FROM runs").fetchone()[0])
    db.close()
    assert seen <= {0, 120}, f"a reader saw part of the burst: {sorted(seen)}"
    done = wait_for(lambda: ended(project, 120), timeout=60, what="every run of the burst to end")
    assert daemon.stop() == 0
    assert sorted(r["job"] for r in done) == [f"j{i:03d}" for i in range(120)]  # none missed, none doubled
    odd = [(r["job"], r["status"], r["reason"], r["error"]) for r in done if r["status"] != "succeeded"]
    assert not odd, f"runs of the burst that did not succeed: {odd}"
    assert {(r["slot"], r["status"], r["attempt"]) for r in done} == {
        (t0.isoformat(timespec="milliseconds"), "succeeded", 1)
    }
    assert len(rows(project.home)) == 120


def test_created_at_is_the_insert_time_not_the_tick(project, serve):
    """The test holds runner.db's write lock across the slot: serve's tick has read its clock but
    cannot insert until the lock is released, and the rows say when they were really written."""
    write_config(project, max_parallel=8)
    t0 = burst(project, 5, "'true'", lead=20)  # room for a slow serve start on a loaded machine
    daemon = serve().started()
    db = project.db(timeout=30, isolation_level=None)
    sleep_until(t0 - timedelta(seconds=0.3))
    assert datetime.now(UTC) < t0, "serve started too late for this test's slot"
    db.execute("BEGIN IMMEDIATE")
    sleep_until(t0 + timedelta(seconds=1.0))
    released = datetime.now(UTC)
    db.execute("COMMIT")
    db.close()
    done = wait_for(lambda: ended(project, 5), timeout=30, what="the runs to end")
    assert daemon.stop() == 0
    for r in done:
        created = ts(r["created_at"])
        assert created >= released - MS, (r["created_at"], released)
        assert ts(r["dispatched_at"]) >= created - MS
        assert ts(r["started_at"]) >= ts(r["dispatched_at"]) - MS
        assert r["status"] == "succeeded"


def test_max_parallel_holds_under_a_burst_and_the_queue_wait_is_recorded(project, serve):
    write_config(project, max_parallel=3)
    burst(project, 12, "'sleep 0.3'", lead=5)
    daemon = serve().started()
    done = wait_for(lambda: ended(project, 12), timeout=60, what="every run to end")
    assert daemon.stop() == 0
    assert {r["status"] for r in done} == {"succeeded"} and len({r["job"] for r in done}) == 12
    edges = sorted([(ts(r["started_at"]), 1) for r in done] + [(ts(r["ended_at"]), -1) for r in done])
    at_once = peak = 0
    for _, step in edges:  # an end and a start at the same millisecond: the end counts first
        at_once += step
        peak = max(peak, at_once)
    assert peak <= 3
    for r in done:  # queue wait = the worker took the run - written to the ledger; waited_s: for a slot
        queue = (ts(r["dispatched_at"]) - ts(r["created_at"])).total_seconds()
        assert r["waited_s"] - 0.01 <= queue < r["waited_s"] + 2.0, (queue, r["waited_s"])
    assert max(r["waited_s"] for r in done) >= 0.6  # 12 runs of 0.3 s through 3 slots
    last = max(done, key=lambda r: r["waited_s"])
    shown = project.cli("runs", "show", last["id"]).output
    assert f"({last['waited_s']:.3f}s for a slot)" in shown and "worker start" in shown
