"""The kanban dispatcher under ``executor: celery`` with real processes: serve's dispatcher claims
tasks in the shared store and sends each attempt to a ``runner worker`` (each its own RUNNER_HOME
and project folder) through a real redis-server."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from runner.testing import call, final, hang
from tests.dist.conftest import Cluster, Machine, Redis, wait_ready_all
from tests.servehelp import wait_for

JOBS = """
jobs:
  chore:
    agent: false
    pre_run: 'sleep {sleep}; echo "done $HERMES_KANBAN_TASK"'
"""

KANBAN = """
kanban:
  max_workers: {max_workers}
  lease_seconds: {lease}
  retry_backoff: {backoff}
  poll_seconds: 0.2
"""


def add_task(m: Machine, title: str, *args: str, job: str = "chore") -> int:
    out = m.cli("kanban", "add", title, "--job", job, "--json", *args)
    assert out.returncode == 0, out.stderr
    return int(json.loads(out.stdout)["id"])


def tasks(cluster: Cluster) -> dict[int, dict[str, Any]]:
    return {r["id"]: r for r in cluster.rows("SELECT * FROM tasks ORDER BY id")}


def kanban_runs(cluster: Cluster) -> list[dict[str, Any]]:
    return cluster.rows("SELECT * FROM runs WHERE trigger='kanban' ORDER BY created_at, id")


def events(cluster: Cluster, kind: str) -> list[dict[str, Any]]:
    return cluster.rows("SELECT * FROM task_events WHERE kind=? ORDER BY id", (kind,))


def state(cluster: Cluster, *machines: Machine) -> str:
    """What a failed wait shows: the board's events, the attempts' runs, the machines' log tails."""
    rows = [*cluster.rows("SELECT * FROM task_events ORDER BY id"), *kanban_runs(cluster)]
    logs = [f"== {m.name}\n{m.log()[-3000:]}" for m in machines]
    return "\n".join([*map(str, rows), *logs])


def start_serve(cluster: Cluster, *, lease: float = 30, backoff: float = 0, via: str = "serve") -> Machine:
    """The dispatcher: inside ``runner serve``, or ``runner kanban dispatch`` (no serve at all)."""
    extra = KANBAN.format(lease=lease, backoff=backoff, max_workers=4)
    if via == "dispatch":
        m = cluster.machine("dispatcher", extra=extra).start("kanban", "dispatch")
        cluster.wait_ready(m, "dispatching (max_workers")
        return m
    serve = cluster.serve(extra=extra)
    cluster.wait_ready(serve, "kanban: attempts go to runner worker processes")
    return serve


def test_attempts_run_on_several_workers_once_each(cluster: Cluster) -> None:
    cluster.write_jobs(JOBS.format(sleep=1))
    workers = [cluster.worker(f"w{i}", concurrency=1) for i in range(2)]
    wait_ready_all(cluster, workers)
    serve = start_serve(cluster)
    ids = [add_task(serve, f"chore {i}") for i in range(4)]
    wait_for(
        lambda: all(t["status"] == "done" for t in tasks(cluster).values()) and len(tasks(cluster)) == len(ids),
        timeout=90,
        what="every task done",
    )
    board = tasks(cluster)
    assert all(board[i]["result"].strip() == f"done {i}" for i in ids)
    runs = kanban_runs(cluster)
    assert sorted(int(r["task_id"]) for r in runs) == sorted(ids)  # one attempt each
    assert all(r["status"] == "succeeded" for r in runs)
    assert {r["worker"].split("@")[0] for r in runs} == {"w0", "w1"}  # attempts ran on both workers
    taken = Counter((e["task_id"], e["fence"]) for e in events(cluster, "taken"))
    assert set(taken) == {(i, board[i]["fence"]) for i in ids} and max(taken.values()) == 1
    assert not events(cluster, "attempt_failed")
    redeliver(cluster, [(i, board[i]["fence"]) for i in ids])  # what acks_late may deliver again
    wait_for(lambda: len(refused_takes(cluster)) == len(ids), timeout=60, what="every redelivery refused")
    assert len(kanban_runs(cluster)) == len(ids) and all(t["status"] == "done" for t in tasks(cluster).values())


def redeliver(cluster: Cluster, claims: list[tuple[int, int]]) -> None:
    """Send each claim's attempt again, as the broker does with an unacknowledged message."""
    from runner.dist.app import KANBAN_TASK, celery_app

    app = celery_app(cluster.broker)
    for task_id, fence in claims:
        app.send_task(KANBAN_TASK, args=[task_id, fence, "any", "chore", 1, 30.0], queue="runner")


def refused_takes(cluster: Cluster) -> list[dict[str, Any]]:
    return [e for e in events(cluster, "refused") if json.loads(e["payload"])["action"] == "take"]


def test_attempts_follow_the_jobs_queue(cluster: Cluster) -> None:
    cluster.write_jobs(
        """
        jobs:
          chore:
            agent: false
            pre_run: echo plain
          render:
            agent: false
            pre_run: echo gpu
            queue: gpu
        """
    )
    main = cluster.worker("main", concurrency=2)
    gpu = cluster.worker("gpu", concurrency=2, queues="gpu")
    wait_ready_all(cluster, [main, gpu])
    serve = start_serve(cluster)
    plain = [add_task(serve, f"plain {i}") for i in range(2)]
    rendered = [add_task(serve, f"render {i}", job="render") for i in range(2)]
    wait_for(lambda: all(t["status"] == "done" for t in tasks(cluster).values()), timeout=60, what="every task done")
    by_task = {int(r["task_id"]): r["worker"].split("@")[0] for r in kanban_runs(cluster)}
    assert by_task == {**dict.fromkeys(plain, "main"), **dict.fromkeys(rendered, "gpu")}


def test_jobs_mismatch_fails_the_attempt_then_a_good_worker_completes_it(cluster: Cluster) -> None:
    cluster.write_jobs(JOBS.format(sleep=0))
    bad = cluster.machine("bad")
    bad.jobs_path.write_text(bad.jobs_path.read_text().replace("done", "other"))
    bad.start("worker", "--hostname", "bad@test", "--concurrency", "1")
    wait_ready_all(cluster, [bad])
    serve = start_serve(cluster, backoff=1)
    task = add_task(serve, "needs the right jobs.yaml", "--max-attempts", "6")
    wait_for(lambda: [r for r in kanban_runs(cluster) if r["reason"] == "jobs_mismatch"], timeout=60)
    bad.stop()
    good = cluster.worker("good", concurrency=1)
    wait_for(lambda: tasks(cluster)[task]["status"] == "done", timeout=90, what="the task done by the good worker")
    runs = kanban_runs(cluster)
    refused = [r for r in runs if r["reason"] == "jobs_mismatch"]
    assert refused and all(r["status"] == "failed" and r["worker"].startswith("bad@test") for r in refused)
    assert "differs from the dispatcher's" in refused[0]["error"]
    done = [r for r in runs if r["status"] == "succeeded"]
    assert len(done) == 1 and done[0]["worker"].startswith("good@test")
    failed = events(cluster, "attempt_failed")
    assert failed and all("jobs_mismatch" in json.loads(e["payload"])["error"] for e in failed)
    assert tasks(cluster)[task]["result"].strip() == f"done {task}"
    assert good.proc is not None and good.proc.poll() is None


@pytest.mark.parametrize("via", ["serve", "dispatch"])
def test_worker_killed_mid_attempt_is_reclaimed_and_retried_elsewhere(cluster: Cluster, via: str) -> None:
    cluster.write_jobs(JOBS.format(sleep=4))
    doomed = cluster.worker("doomed", concurrency=1)
    wait_ready_all(cluster, [doomed])
    serve = start_serve(cluster, lease=6, via=via)
    task = add_task(serve, "survives a lost worker")
    wait_for(
        lambda: [r for r in kanban_runs(cluster) if r["status"] == "running"], timeout=60, what="the attempt to start"
    )
    doomed.kill_tree()  # the machine is gone: no lease renewal, no heartbeat from now on
    spare = cluster.worker("spare", concurrency=1)
    try:
        wait_for(lambda: tasks(cluster)[task]["status"] == "done", timeout=90, what="the retry on the spare worker")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{state(cluster, serve, spare)}") from None
    reclaimed = events(cluster, "reclaimed")
    assert [e["task_id"] for e in reclaimed] == [task]
    first = wait_for(
        lambda: [r for r in kanban_runs(cluster) if r["worker"].startswith("doomed@") and r["status"] == "unknown"],
        timeout=30,
        what="the lost attempt's run to end unknown",
    )[0]
    assert first["reason"] == "worker_lost"
    runs = kanban_runs(cluster)
    assert not [r for r in runs if r["status"] in ("queued", "running")]
    done = [r for r in runs if r["status"] == "succeeded"]
    assert len(done) == 1 and done[0]["worker"].startswith("spare@test")
    taken = Counter((e["task_id"], e["fence"]) for e in events(cluster, "taken"))
    assert len(taken) == 2 and max(taken.values()) == 1  # one take per fence: the lost one, the retry
    assert spare.proc is not None and spare.proc.poll() is None


def test_kanban_dispatch_command_sends_attempts_to_workers_up_to_max_workers(cluster: Cluster) -> None:
    cluster.write_jobs(JOBS.format(sleep=1))
    worker = cluster.worker("w0", concurrency=3)
    wait_ready_all(cluster, [worker])
    config = KANBAN.format(lease=30, backoff=0, max_workers=1)  # one attempt in flight, whatever the workers hold
    dispatcher = cluster.machine("dispatcher", extra=config).start("kanban", "dispatch")
    ids = [add_task(dispatcher, f"chore {i}") for i in range(3)]
    wait_for(lambda: all(tasks(cluster)[i]["status"] == "done" for i in ids), timeout=90, what="every task done")
    runs = kanban_runs(cluster)
    assert {r["worker"].split("@")[0] for r in runs} == {"w0"} and len(runs) == 3
    for before, after in zip(runs, runs[1:], strict=False):
        assert before["ended_at"] <= after["created_at"], runs  # never two attempts at once
    dispatcher.stop()
    log = dispatcher.log()
    assert "sent to a runner worker" in log and "dispatcher stopped" in log


def test_attempts_lost_in_a_broker_restart_are_sent_again(cluster: Cluster, redis_server: Redis) -> None:
    """Attempts sent while no worker listens wait in the broker; a broker restart (no persistence)
    loses them. serve keeps their claims and sends them again (``resend_s``): each runs once."""
    cluster.write_jobs(JOBS.format(sleep=0))
    serve = start_serve(cluster)  # no worker yet: what serve sends waits in the broker
    ids = [add_task(serve, f"chore {i}") for i in range(3)]
    wait_for(lambda: len(events(cluster, "claimed")) >= 3, timeout=30, what="3 attempts claimed and sent")
    redis_server.stop()  # what it held is gone
    redis_server.start()
    worker = cluster.worker("w0", concurrency=2)
    wait_ready_all(cluster, [worker])
    wait_for(
        lambda: all(tasks(cluster)[i]["status"] == "done" for i in ids),
        timeout=90,
        what="every task done",
    )
    assert "sending it again" in serve.log()
    board = tasks(cluster)
    runs = kanban_runs(cluster)
    assert sorted(int(r["task_id"]) for r in runs) == sorted(ids) and all(r["status"] == "succeeded" for r in runs)
    taken = Counter((e["task_id"], e["fence"]) for e in events(cluster, "taken"))
    assert set(taken) == {(i, board[i]["fence"]) for i in ids} and max(taken.values()) == 1


def test_a_standby_finishes_the_attempts_a_dead_leader_sent(cluster: Cluster) -> None:
    """The leading serve claims and sends attempts while no worker listens, then dies (SIGKILL).
    The standby leads; a worker comes up and takes what waits in the broker, or the standby
    reclaims the claims once their leases lapse and sends them again. Each task ends done with one
    succeeded attempt, and nothing is left running."""
    cluster.write_jobs(JOBS.format(sleep=0))
    extra = KANBAN.format(lease=6, backoff=0, max_workers=4)
    leader = cluster.serve("serve-a", extra=extra)
    cluster.wait_ready(leader, "kanban: attempts go to runner worker processes")
    standby = cluster.serve("serve-b", extra=extra)
    cluster.wait_ready(standby, "standing by")
    ids = [add_task(leader, f"chore {i}") for i in range(3)]
    wait_for(lambda: len(events(cluster, "claimed")) >= 3, timeout=30, what="3 attempts claimed and sent")
    leader.kill_tree()
    cluster.wait_ready(standby, "this serve leads now", timeout=20)
    worker = cluster.worker("w0", concurrency=2)
    wait_ready_all(cluster, [worker])
    wait_for(lambda: all(tasks(cluster)[i]["status"] == "done" for i in ids), timeout=90, what="every task done")
    standby.stop()
    runs = kanban_runs(cluster)
    done = Counter(int(r["task_id"]) for r in runs if r["status"] == "succeeded")
    assert done == Counter(ids), runs
    assert not [r for r in runs if r["status"] in ("queued", "running")]
    taken = Counter((e["task_id"], e["fence"]) for e in events(cluster, "taken"))
    assert max(taken.values()) == 1


def test_a_lost_workers_agent_attempt_is_resumed_by_another_worker(cluster: Cluster) -> None:
    """Durable kanban attempts (issue 33) under the Celery executor: the machine running an agent
    task is killed while turn 4 waits for the model; the lease runs out, the board reclaims the task
    and the ledger ends the attempt's run ``unknown/worker_lost`` in the same pass, so the attempt a
    spare worker takes resumes that run from the journal: turns 1-3 are not asked again, their
    commands do not run again, and the model is told it is attempt 2."""
    work = cluster.tmp / "work"  # one folder both machines see (as a shared volume would be)
    work.mkdir()
    marker = work / "marker.txt"
    cluster.write_jobs(
        f"jobs:\n  agent:\n    prompt: Work on your kanban task.\n    toolsets: [kanban, terminal]\n    workdir: {work}\n"
    )
    for n in (1, 2, 3):
        cluster.fake.add(call("terminal", {"command": f"echo turn-{n} >> {marker}"}))
    cluster.fake.add(hang(60))  # turn 4's first request: the machine is gone while it waits
    cluster.fake.add(
        call("terminal", {"command": f"echo turn-4 >> {marker}"}),
        call("kanban_complete", {"result": "four turns"}),
        final("done"),
    )
    doomed = cluster.worker("doomed", concurrency=1)
    wait_ready_all(cluster, [doomed])
    serve = start_serve(cluster, lease=6)
    task = add_task(serve, "count to four", job="agent")
    wait_for(lambda: len(cluster.fake.requests) >= 4, timeout=60, what="turn 4's request")
    doomed.kill_tree()
    spare = cluster.worker("spare", concurrency=1)
    try:
        wait_for(lambda: tasks(cluster)[task]["status"] == "done", timeout=90, what="the resumed attempt")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{state(cluster, serve, spare)}") from None
    # the lost run's verdict: the heartbeats or the lease, whichever came first (both say worker_lost)
    runs = wait_for(
        lambda: (r := kanban_runs(cluster)) and r[-1]["ended_at"] and r, timeout=30, what="the attempt's run to end"
    )
    assert [(r["attempt"], r["status"], r["reason"]) for r in runs] == [(1, "unknown", "worker_lost"), (2, "succeeded", None)]
    assert runs[1]["parent_run"] == runs[0]["id"] and runs[1]["worker"].startswith("spare@")
    assert marker.read_text().splitlines() == ["turn-1", "turn-2", "turn-3", "turn-4"]  # each command once
    sizes = [len(r["body"]["messages"]) for r in cluster.fake.requests]
    assert sizes == [2, 4, 6, 8, 9, 11, 13], sizes  # turn 4 asked again with one message more: the resume note
    note = cluster.fake.requests[4]["body"]["messages"][-1]["content"]
    assert "attempt 2 of" in note and "lease expired" in note, note
    assert tasks(cluster)[task]["result"] == "four turns"
