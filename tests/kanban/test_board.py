"""The board API on a real SQLite file and a real PostgreSQL database, time injected: transitions, claims, leases, fencing."""

from datetime import UTC, datetime, timedelta

import pytest

from runner.errors import UsageError
from runner.store import Store
from runner.store.board import Board
from runner.store.tasks import FenceError, TaskNotFound, backoff_seconds

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.fixture
def board(where):
    store = Store.open(where)  # each test runs on SQLite and on PostgreSQL
    b = Board(store, host="here")
    yield b
    b.close()
    store.close()


def kinds(board, task_id):
    return [e["kind"] for e in board.events(task_id)]


def test_parents_gate_readiness_and_completion_promotes_children(board):
    a = board.add("A", now=at(0))
    b = board.add("B", now=at(1), parents=[a])
    c = board.add("C", now=at(2), parents=[b])
    assert [board.get(i).status for i in (a, b, c)] == ["ready", "todo", "todo"]
    [claim] = board.claim("w", now=at(3), lease_seconds=60, limit=5)
    assert claim.task_id == a and claim.fence == 1 and claim.attempt == 1
    board.complete(a, claim.fence, "result A", now=at(4))
    assert [board.get(i).status for i in (a, b, c)] == ["done", "ready", "todo"]
    assert [p.id for p in board.parents(c)] == [b] and [k.id for k in board.children(a)] == [b]
    assert kinds(board, b) == ["created", "promoted"]


def test_promote_catches_parents_finished_by_hand(board):
    a = board.add("A", now=at(0))
    b = board.add("B", now=at(0), parents=[a])
    board.store.execute("UPDATE tasks SET status='done' WHERE id=?", (a,))
    assert board.promote(now=at(1)) == [b]
    assert board.promote(now=at(2)) == []


def test_claims_by_priority_then_age_up_to_limit(board):
    low_old = board.add("low old", now=at(0))
    high_new = board.add("high new", now=at(5), priority=5)
    low_new = board.add("low new", now=at(6))
    claims = board.claim("w", now=at(10), lease_seconds=60, limit=2)
    assert [c.task_id for c in claims] == [high_new, low_old]
    assert board.claim("w", now=at(10), lease_seconds=60, limit=2)[0].task_id == low_new
    assert board.claim("w", now=at(10), lease_seconds=60) == []
    assert board.running_on("here") == 3


def test_stale_fence_is_refused_and_new_owner_stands(board):
    t = board.add("t", now=at(0))
    [first] = board.claim("first", now=at(1), lease_seconds=10)
    assert board.renew(t, first.fence, now=at(5), lease_seconds=10) == "renewed"
    assert board.reclaim_expired(now=at(14), backoff=0) == []  # renewed until 15
    [gone] = board.reclaim_expired(now=at(16), backoff=0)
    assert (gone.task_id, gone.fence, gone.owner, gone.status) == (t, 1, "first", "ready")
    [second] = board.claim("second", now=at(17), lease_seconds=10)
    assert second.fence == 2 and second.attempt == 2
    with pytest.raises(FenceError, match="holds fence 1 but the task is running with fence 2"):
        board.complete(t, first.fence, "late", now=at(18))
    with pytest.raises(FenceError):
        board.comment(t, "late note", now=at(18), fence=first.fence)
    assert board.renew(t, first.fence, now=at(18), lease_seconds=10) == "lost"
    board.complete(t, second.fence, "second's result", now=at(19))
    task = board.get(t)
    assert (task.status, task.result, task.attempts) == ("done", "second's result", 2)
    assert board.renew(t, second.fence, now=at(20), lease_seconds=10) == "ended"
    assert kinds(board, t) == [
        "created",
        "claimed",
        "reclaimed",
        "attempt_failed",
        "claimed",
        "refused",
        "refused",
        "refused",
        "completed",
    ]
    assert board.comments(t) == []


def test_failed_attempts_back_off_then_fail_with_last_error(board):
    t = board.add("poison", now=at(0), max_attempts=3)
    for n in (1, 2, 3):
        [c] = board.claim("w", now=at(100 * n), lease_seconds=10)
        status = board.fail_attempt(t, c.fence, f"boom {n}", now=at(100 * n + 1), backoff=10)
        assert status == ("failed" if n == 3 else "ready")
        if n < 3:
            assert board.claim("w", now=at(100 * n + 2), lease_seconds=10) == []  # backing off
            assert board.get(t).not_before == (at(100 * n + 1) + timedelta(seconds=10 * 2 ** (n - 1))).isoformat(
                timespec="milliseconds"
            )
    task = board.get(t)
    assert (task.status, task.attempts, task.error) == ("failed", 3, "boom 3")
    assert backoff_seconds(30, 1) == 30 and backoff_seconds(30, 2) == 60 and backoff_seconds(30, 20) == 3600
    assert backoff_seconds(0, 5) == 0


def test_worker_exit_fails_attempt_only_while_its_claim_holds(board):
    t = board.add("t", now=at(0))
    [c] = board.claim("w", now=at(1), lease_seconds=10)
    assert board.worker_exited(t, c.fence, -9, now=at(2), backoff=0) == "ready"
    assert "exited with code -9" in (board.get(t).error or "")
    assert board.worker_exited(t, c.fence, -9, now=at(3), backoff=0) is None


def test_hand_moves_revoke_claims_and_reset_attempts(board):
    t = board.add("t", now=at(0), max_attempts=1)
    [c] = board.claim("w", now=at(1), lease_seconds=10)
    board.block(t, "needs a password", now=at(2))
    assert board.get(t).reason == "needs a password"
    with pytest.raises(FenceError):
        board.complete(t, c.fence, "x", now=at(3))
    again = board.unblock(t, now=at(4))
    assert (again.status, again.attempts, again.reason) == ("ready", 0, None)
    with pytest.raises(UsageError, match="not blocked"):
        board.unblock(t, now=at(5))
    with pytest.raises(UsageError, match="dispatcher claims"):
        board.move(t, "running", now=at(5))
    with pytest.raises(UsageError, match="unknown status"):
        board.move(t, "doing", now=at(5))
    assert board.move(t, "archived", now=at(6)).status == "archived"
    assert board.tasks() == [] and [x.id for x in board.tasks(include_archived=True)] == [t]
    child = board.add("child", now=at(7), parents=[t])
    assert board.move(child, "ready", now=at(8)).status == "todo"  # its parent is not done


def test_worker_writes_need_the_fence(board):
    t = board.add("t", now=at(0))
    [c] = board.claim("w", now=at(1), lease_seconds=10)
    board.attach(t, c.fence, pid=123, pid_start="9", now=at(1))
    kid = board.add("follow-up", now=at(2), parents=[t], fence=(t, c.fence))
    board.comment(t, "halfway", now=at(2), author="worker", fence=c.fence)
    board.block(t, "waiting for review", now=at(3), fence=c.fence)
    with pytest.raises(FenceError):
        board.add("late", now=at(4), parents=[t], fence=(t, c.fence))
    assert board.get(kid).status == "todo" and board.get(t).worker_pid == 123
    assert [x["body"] for x in board.comments(t)] == ["halfway"]


def test_bad_input_is_a_usage_error(board):
    with pytest.raises(TaskNotFound):
        board.get(99)
    with pytest.raises(TaskNotFound):
        board.add("orphan", now=at(0), parents=[42])
    with pytest.raises(UsageError):
        board.add("  ", now=at(0))
    with pytest.raises(UsageError):
        board.comment(board.add("t", now=at(0)), " ", now=at(0))


def test_take_is_exclusive_per_fence_and_refuses_stale_deliveries(board):
    """A remote worker's take: the first delivery under the fence wins; a second one, or a late one
    after a reclaim, is refused (recorded) and never starts the attempt again."""
    from runner.store.tasks import AlreadyTaken

    t = board.add("t", now=at(0))
    [claim] = board.claim("here:1:dispatch", now=at(1), lease_seconds=10)
    assert board.attempt_states([t])[t].taken is False
    worker = Board(board.store, host="w0@test/7")
    worker.take(t, claim.fence, pid=7, pid_start=None, now=at(2))
    state = board.attempt_states([t])[t]
    assert state.taken and state.running_under(claim.fence) and board.get(t).host == "w0@test/7"
    with pytest.raises(AlreadyTaken, match="another worker already took"):
        Board(board.store, host="w1@test/8").take(t, claim.fence, pid=8, pid_start=None, now=at(3))
    assert board.running_claimed_by("here:%") == 1 and board.running_claimed_by("elsewhere:%") == 0
    board.reclaim_expired(now=at(20), backoff=0)  # the worker was lost: no renewal
    [again] = board.claim("here:1:dispatch", now=at(21), lease_seconds=10)
    with pytest.raises(FenceError) as late:
        worker.take(t, claim.fence, pid=7, pid_start=None, now=at(22))  # the first message, delivered late
    assert not isinstance(late.value, AlreadyTaken)
    worker.take(t, again.fence, pid=9, pid_start=None, now=at(23))
    refused = [e for e in board.events(t) if e["kind"] == "refused"]
    assert [e["fence"] for e in refused] == [claim.fence, claim.fence]
    assert [e["fence"] for e in board.events(t) if e["kind"] == "taken"] == [claim.fence, again.fence]
    worker.close()
