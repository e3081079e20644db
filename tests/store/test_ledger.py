"""The ledger's one owner of run state (runner/store/ledger.py) on SQLite and PostgreSQL: only the
legal moves happen, each operation says whether it won, a final status never changes (but for a
refused result), and a forbidden write raises under RUNNER_LEDGER_STRICT (the suite sets it)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from runner.clock import iso, utcnow
from runner.statuses import ACTIVE, FINAL, ApprovalState, RunStatus, Trigger
from runner.store import ledger, queries
from runner.store.control import answer_approval, get_request, park, pending_approvals


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
    assert set(ledger.sources(RunStatus.RUNNING)) == {RunStatus.QUEUED, RunStatus.WAITING}
    assert ledger.sources(RunStatus.WAITING) == (RunStatus.RUNNING,)
    assert RunStatus.WAITING in ACTIVE and RunStatus.WAITING not in FINAL


def parked(store, run_id: str, *, command: str = "rm -rf build") -> str:
    """A pending approval request for ``run_id`` and the run ``waiting`` on it, as Parking writes them."""
    now = utcnow()
    with store.transaction():
        request = park(store, run_id=run_id, job="j", command=command, reasons=("r",), now=now, expires=now)
        assert ledger.wait(store, run_id)
    return request.id


def test_waiting_while_parked_then_running_again(any_store):
    run_id = queued(any_store)
    ledger.start(any_store, run_id)
    approval = parked(any_store, run_id)
    assert status(any_store, run_id) == RunStatus.WAITING
    assert ledger.get(any_store, run_id).active  # type: ignore[union-attr]
    assert [w.approval_id for w in queries.waiting_runs(any_store)] == [approval]
    assert queries.waiting_count(any_store) == 1
    assert [a.id for a in pending_approvals(any_store)] == [approval]  # a waiting run is answerable
    answer_approval(any_store, approval, granted=True, by="me@host")
    assert ledger.resume(any_store, run_id)
    assert status(any_store, run_id) == RunStatus.RUNNING
    with pytest.raises(ledger.IllegalTransition):
        ledger.resume(any_store, run_id)  # running -> running
    assert queries.waiting_count(any_store) == 0
    assert ledger.finish(any_store, run_id, RunStatus.SUCCEEDED)


def test_a_forbidden_move_into_or_out_of_waiting_raises(any_store):
    run_id = queued(any_store)
    ledger.start(any_store, run_id)
    parked(any_store, run_id)
    with pytest.raises(ledger.IllegalTransition):
        ledger.wait(any_store, run_id)  # waiting -> waiting
    with pytest.raises(ledger.IllegalTransition):
        ledger.finish(any_store, run_id, RunStatus.SUCCEEDED)  # a run succeeds only once running again
    other = queued(any_store)
    with pytest.raises(ledger.IllegalTransition):
        ledger.wait(any_store, other)  # only a running run parks


@pytest.mark.parametrize(
    "end",
    [
        lambda s, r: ledger.declare_lost(s, r, error="no heartbeat"),
        lambda s, r: ledger.worker_died(s, r, -9, sweep=False),
        lambda s, r: ledger.finish(s, r, RunStatus.INTERRUPTED, reason="shutdown"),
        lambda s, r: ledger.finish(s, r, RunStatus.TIMED_OUT, reason="timeout"),
    ],
    ids=["lost", "worker_died", "shutdown", "timeout"],
)
def test_a_waiting_run_ended_by_someone_else_abandons_its_request(any_store, end):
    run_id = queued(any_store)
    ledger.start(any_store, run_id)
    approval = parked(any_store, run_id)
    assert end(any_store, run_id)
    row = ledger.get(any_store, run_id)
    assert row is not None and row.status in FINAL
    assert get_request(any_store, approval).status == ApprovalState.ABANDONED
    assert pending_approvals(any_store) == [] and queries.waiting_count(any_store) == 0
    assert not ledger.resume(any_store, run_id)  # its process, should it come back, is fenced out


def test_supervisors_see_a_waiting_run_as_held(any_store):
    run_id = queued(any_store)
    assert ledger.claim_for_worker(any_store, run_id, "w1") is not None
    ledger.start(any_store, run_id)
    parked(any_store, run_id)
    assert ledger.is_active(any_store, run_id)
    assert run_id in ledger.running_ids(any_store)
    assert [r.id for r in ledger.running_on_workers(any_store, (Trigger.SCHEDULE,))] == [run_id]
    assert ledger.request_stop(any_store, run_id, "term")
    assert ledger.stop_requests(any_store, "w1") == {run_id: "term"}
    later = utcnow() + timedelta(hours=1)
    ledger.heartbeat(any_store, "w1", [run_id], now=later)
    assert ledger.get(any_store, run_id).heartbeat_at == iso(later)  # type: ignore[union-attr]
    assert ledger.activity(any_store)[0] == 1  # the Curator waits for it
    lost = ledger.recover_stale(any_store, now=later + timedelta(hours=1), lost_after_s=60)
    assert lost == [run_id] and status(any_store, run_id) == RunStatus.UNKNOWN


def test_live_counters_only_while_the_run_is_active(any_store):
    run_id = queued(any_store)
    ledger.start(any_store, run_id)
    assert ledger.progress(any_store, run_id, ledger.Progress(2, 100, 20, 5, 0.0012345678))
    row = ledger.get(any_store, run_id)
    got = any_store.one("SELECT iterations, prompt_tokens, completion_tokens, cached_tokens, cost_usd FROM runs WHERE id=?", (run_id,))
    assert row is not None and dict(got) == {
        "iterations": 2, "prompt_tokens": 100, "completion_tokens": 20, "cached_tokens": 5, "cost_usd": 0.001235
    }
    parked(any_store, run_id)
    assert ledger.progress(any_store, run_id, ledger.Progress(3, 150, 30, 5, 0.002))  # waiting: still live
    ledger.resume(any_store, run_id)
    ledger.set_fields(any_store, run_id, iterations=4, prompt_tokens=200, completion_tokens=40, cost_usd=0.003)
    ledger.finish(any_store, run_id, RunStatus.SUCCEEDED)
    assert not ledger.progress(any_store, run_id, ledger.Progress(9, 999, 99, 9, 9.0))  # never after the end
    got = any_store.one("SELECT iterations, prompt_tokens, cost_usd FROM runs WHERE id=?", (run_id,))
    assert dict(got) == {"iterations": 4, "prompt_tokens": 200, "cost_usd": 0.003}


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
