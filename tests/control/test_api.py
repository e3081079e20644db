"""``runner.store.control``, the API the CLI and the web's buttons call, on a real SQLite store."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from runner.clock import utcnow
from runner.statuses import ApprovalState, RunStatus, Trigger
from runner.store import Store, ledger
from runner.store.board import Board
from runner.store.control import (
    ControlRefused,
    answer_approval,
    cancel_requested,
    get_request,
    mark_handled,
    open_triggers,
    park,
    pending_approvals,
    request_cancel,
    request_trigger,
    retry_task,
    whoami,
)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store.open(tmp_path / "runner.db")
    yield s
    s.close()


def parked(store: Store, command: str = "rm -rf build") -> tuple[str, str]:
    run_id = ledger.open_run(store, job="j", trigger=Trigger.MANUAL)
    now = utcnow()
    expires = now + timedelta(hours=1)
    request = park(store, run_id=run_id, job="j", command=command, reasons=("rm",), now=now, expires=expires)
    return run_id, request.id


def test_trigger_is_a_request_serve_takes_once(store: Store) -> None:
    request_id = request_trigger(store, "nightly", by="alice@host")
    [open_] = open_triggers(store)
    assert (open_.id, open_.job, open_.requested_by) == (request_id, "nightly", "alice@host")
    with store.transaction():
        assert mark_handled(store, request_id, "run-1")
    with store.transaction():
        assert not mark_handled(store, request_id, "run-2")  # a second serve loses
    assert open_triggers(store) == []


def test_cancel_of_a_running_run_and_its_refusals(store: Store) -> None:
    run_id = ledger.open_run(store, job="j", trigger=Trigger.MANUAL)
    assert cancel_requested(store, run_id) is None
    request_cancel(store, run_id[-6:], by="bob@host")  # a unique part of the id is enough
    assert cancel_requested(store, run_id) == "bob@host"
    ledger.finish(store, run_id, RunStatus.INTERRUPTED, reason="cancelled")
    with pytest.raises(ControlRefused) as info:
        request_cancel(store, run_id, by="bob@host")
    assert info.value.reason == "not_running" and info.value.exit_code == 2
    with pytest.raises(ControlRefused) as info:
        request_cancel(store, "nope", by="bob@host")
    assert info.value.reason == "not_found"
    parent = ledger.open_run(store, job="j", trigger=Trigger.MANUAL)
    child = ledger.open_run(store, job="j", trigger=Trigger.DELEGATE, parent_run_id=parent)
    with pytest.raises(ControlRefused) as info:
        request_cancel(store, child, by="bob@host")
    assert info.value.reason == "subagent" and parent in str(info.value)


def test_pending_grant_and_already_decided(store: Store) -> None:
    run_id, approval_id = parked(store)
    [pending] = pending_approvals(store)
    assert (pending.id, pending.run_id, pending.job, pending.command) == (approval_id, run_id, "j", "rm -rf build")
    assert pending.reasons == ("rm",) and pending.expires_at > pending.requested_at
    answer_approval(store, approval_id, granted=True, by="carol@host")
    request = get_request(store, approval_id)
    assert request.status == ApprovalState.GRANTED and request.decided_by == "carol@host" and request.decided_at
    assert pending_approvals(store) == []
    with pytest.raises(ControlRefused) as info:
        answer_approval(store, approval_id, granted=False, by="dave@host")
    assert info.value.reason == "already_decided"
    with pytest.raises(ControlRefused) as info:
        answer_approval(store, "a-missing", granted=True, by="dave@host")
    assert info.value.reason == "not_found"


def test_deny_with_a_reason(store: Store) -> None:
    _, approval_id = parked(store)
    answer_approval(store, approval_id, granted=False, by="web:ops-token", reason="not on prod")
    request = get_request(store, approval_id)
    assert (request.status, request.decided_by, request.reason) == (
        ApprovalState.DENIED,
        "web:ops-token",
        "not on prod",
    )


def test_a_run_that_ended_leaves_nothing_pending(store: Store) -> None:
    run_id, approval_id = parked(store)
    ledger.finish(store, run_id, RunStatus.FAILED, reason="worker_died")
    assert pending_approvals(store) == []
    assert get_request(store, approval_id).status == ApprovalState.ABANDONED
    with pytest.raises(ControlRefused) as info:
        answer_approval(store, approval_id, granted=True, by="x@y")
    assert info.value.reason == "already_decided"


def test_retry_of_a_failed_task_and_refusals(store: Store) -> None:
    board = Board(store)
    now = utcnow()
    task_id = board.add("t", now=now, max_attempts=1)
    store.execute("UPDATE tasks SET status='failed', attempts=max_attempts WHERE id=?", (task_id,))
    retry_task(store, str(task_id), by="erin@host")
    task = board.get(task_id)
    assert task.status == "ready"
    row = store.one("SELECT attempts, max_attempts FROM tasks WHERE id=?", (task_id,))
    assert row["max_attempts"] == row["attempts"] + 1  # one more attempt; the earlier ones stay counted
    with pytest.raises(ControlRefused) as info:
        retry_task(store, str(task_id), by="erin@host")
    assert info.value.reason == "not_retryable" and "ready" in str(info.value)
    with pytest.raises(ControlRefused) as info:
        retry_task(store, "999", by="erin@host")
    assert info.value.reason == "not_found"
    board.close()


def test_whoami_names_user_and_host() -> None:
    assert "@" in whoami()
