"""The ledger's one owner of run state (runner/store/ledger.py) on SQLite and PostgreSQL: only the
legal moves happen, each operation says whether it won, a final status never changes (but for a
refused result), and a forbidden write raises under RUNNER_LEDGER_STRICT (the suite sets it)."""

from __future__ import annotations

import pytest

from runner.statuses import FINAL, RunStatus, Trigger
from runner.store import ledger


def queued(store, job: str = "j") -> str:
    return ledger.open_run(store, job=job, trigger=Trigger.SCHEDULE, status=RunStatus.QUEUED)


def status(store, run_id: str) -> RunStatus:
    row = ledger.get(store, run_id)
    assert row is not None
    return row.status


def test_the_table_has_no_way_out_of_a_final_status():
    for final in FINAL:
        assert ledger.LEGAL[final] == frozenset()
        assert final in ledger.LEGAL[RunStatus.QUEUED]
    assert RunStatus.QUEUED not in ledger.sources(RunStatus.QUEUED)
    assert ledger.sources(RunStatus.RUNNING) == (RunStatus.QUEUED,)


def test_queued_then_running_then_finished_and_never_again(any_store):
    run_id = queued(any_store)
    assert ledger.start(any_store, run_id)
    assert ledger.finish(any_store, run_id, RunStatus.SUCCEEDED)
    assert not ledger.finish(any_store, run_id, RunStatus.FAILED, reason="late", error="a second end")
    row = ledger.get(any_store, run_id)
    assert row is not None and (row.status, row.reason) == (RunStatus.SUCCEEDED, None)


def test_a_run_declared_lost_keeps_that_verdict_against_its_workers_late_end(any_store):
    run_id = queued(any_store)
    assert ledger.claim_for_worker(any_store, run_id, "w1") is not None
    assert ledger.claim_for_worker(any_store, run_id, "w2") is None  # a duplicate message
    assert ledger.start(any_store, run_id)
    assert ledger.declare_lost(any_store, run_id, error="no heartbeat")
    assert not ledger.finish(any_store, run_id, RunStatus.SUCCEEDED)  # the partition healed too late
    assert ledger.lost_among(any_store, [run_id]) == [run_id]
    assert status(any_store, run_id) == RunStatus.UNKNOWN


def test_a_cancelled_queued_run_cannot_start(any_store):
    run_id = queued(any_store)
    assert ledger.drop_unclaimed(any_store, run_id, marker="-")
    assert not ledger.start(any_store, run_id)
    row = ledger.get(any_store, run_id)
    assert row is not None and (row.status, row.reason) == (RunStatus.INTERRUPTED, "not_started")


def test_two_writers_racing_for_the_end_one_wins(any_store):
    run_id = queued(any_store)
    ledger.start(any_store, run_id)
    results = [ledger.finish(any_store, run_id, s, reason=s) for s in (RunStatus.TIMED_OUT, RunStatus.FAILED)]
    assert results == [True, False]
    assert status(any_store, run_id) == RunStatus.TIMED_OUT


def test_a_forbidden_move_raises_in_strict_mode_and_is_refused_otherwise(any_store, monkeypatch, caplog):
    run_id = queued(any_store)
    ledger.start(any_store, run_id)
    with pytest.raises(ledger.IllegalTransition):
        ledger.start(any_store, run_id)  # running -> running
    monkeypatch.delenv("RUNNER_LEDGER_STRICT")
    assert not ledger.start(any_store, run_id)
    assert "the ledger refuses running -> running" in caplog.text
    with pytest.raises(ledger.IllegalTransition):
        ledger.set_fields(any_store, run_id, status=RunStatus.SUCCEEDED)  # never around the operations


def test_a_refused_result_is_the_one_move_out_of_a_final_status(any_store):
    run_id = queued(any_store)
    ledger.start(any_store, run_id)
    ledger.finish(any_store, run_id, RunStatus.SUCCEEDED)
    assert ledger.refuse_result(any_store, run_id, error="fenced out by a newer claim")
    row = ledger.get(any_store, run_id)
    assert row is not None and (row.status, row.reason) == (RunStatus.FAILED, "refused")
    other = queued(any_store)
    ledger.start(any_store, other)
    ledger.declare_lost(any_store, other, error="no heartbeat")
    assert not ledger.refuse_result(any_store, other, error="x")  # never another process's verdict


def test_a_stop_request_says_why_and_a_term_keeps_it(any_store):
    run_id = queued(any_store)
    ledger.start(any_store, run_id)
    assert ledger.request_stop(any_store, run_id, "timeout")
    assert ledger.request_stop(any_store, run_id, "term")
    assert ledger.stop_reason(any_store, run_id) == "timeout"
    assert ledger.stop_outcome("timeout", 90.0)[:2] == (RunStatus.TIMED_OUT, "timeout")
    ledger.finish(any_store, run_id, RunStatus.TIMED_OUT)
    assert not ledger.request_stop(any_store, run_id, "kill")  # not active any more
