"""The Celery executor with real processes: serve on one "machine", ``runner worker``s on others
(each its own RUNNER_HOME and project folder), a real redis-server, the fake model server."""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter

from runner.host.procs import pid_alive
from runner.testing import call, final, hang
from runner.testing.fakeopenai import Reply
from tests.dist.conftest import Cluster, Redis, wait_ready_all
from tests.receivers import Receiver
from tests.servehelp import marker, sleeping, wait_for

EVERY = """
jobs:
  tick:
    schedule: every 1s
    prompt: say hi
    toolsets: []
    memory: off
    overlap: allow
"""


def long_job(seconds: int) -> str:
    """One script-only job that fires once and runs ``seconds``, retried once at once."""
    return (
        "jobs:\n  long:\n    schedule: in 1s\n    agent: false\n"
        f"    pre_run: sleep {seconds}\n    retries: {{attempts: 1, backoff: 0s}}\n"
    )


def test_runs_fire_on_workers_once_each(cluster: Cluster) -> None:
    cluster.fake.default = Reply(content="hi")
    cluster.write_jobs(EVERY)
    workers = [cluster.worker(f"w{i}", concurrency=2) for i in range(3)]
    wait_ready_all(cluster, workers)
    serve = cluster.serve()
    wait_for(lambda: len([r for r in cluster.rows() if r["status"] == "succeeded"]) >= 6, timeout=40, what="6 runs")
    serve.stop()
    rows = cluster.rows()
    slots = Counter((r["job"], r["slot"], r["attempt"]) for r in rows)
    assert max(slots.values()) == 1
    done = [r for r in rows if r["status"] == "succeeded"]
    assert all(r["worker"] and r["worker"].split("@")[0] in {"w0", "w1", "w2"} for r in done)
    assert all(r["host"] for r in done)


def test_jobs_mismatch_fails_the_run(cluster: Cluster) -> None:
    cluster.write_jobs("jobs:\n  once:\n    schedule: in 1s\n    agent: false\n    pre_run: echo hi\n")
    worker = cluster.machine("w0")
    worker.jobs_path.write_text(worker.jobs_path.read_text().replace("echo hi", "echo other"))
    worker.start("worker", "--hostname", "w0@test", "--concurrency", "1")
    wait_ready_all(cluster, [worker])
    cluster.serve()
    row = wait_for(lambda: [r for r in cluster.rows() if r["status"] not in ("queued", "running")], timeout=30)[0]
    assert (row["status"], row["reason"]) == ("failed", "jobs_mismatch")
    assert "differs from the scheduler's" in row["error"]


def test_queue_routes_runs_to_worker_groups(cluster: Cluster) -> None:
    cluster.write_jobs(
        """
        jobs:
          plain:
            schedule: every 1s
            agent: false
            pre_run: echo plain
          gpu:
            schedule: every 1s
            agent: false
            pre_run: echo gpu
            queue: gpu
        """
    )
    main = cluster.worker("main", concurrency=2)
    gpu = cluster.worker("gpu", concurrency=2, queues="gpu")
    wait_ready_all(cluster, [main, gpu])
    serve = cluster.serve()
    wait_for(lambda: len({r["job"] for r in cluster.rows() if r["status"] == "succeeded"}) == 2, timeout=40)
    serve.stop()
    done = [r for r in cluster.rows() if r["status"] == "succeeded"]
    assert {r["worker"].split("@")[0] for r in done if r["job"] == "gpu"} == {"gpu"}
    assert {r["worker"].split("@")[0] for r in done if r["job"] == "plain"} == {"main"}


def test_timeout_stops_a_remote_run(cluster: Cluster) -> None:
    cluster.write_jobs(
        "jobs:\n  slow:\n    schedule: in 1s\n    agent: false\n    timeout: 2s\n    pre_run: sleep 60\n"
    )
    # a grace long enough for the SIGTERM's round trip (serve -> store -> worker -> run -> store ->
    # serve) on a loaded machine, for both who escalate to SIGKILL (the worker, on its own grace,
    # and serve): this test is about the term reaching the remote run
    worker = cluster.worker("w0", concurrency=1, kill_grace=20)
    wait_ready_all(cluster, [worker])
    serve = cluster.serve(kill_grace=20)
    # the worker's run ends `interrupted` by the signal; serve's pool then records why: its timeout
    # (60 s: serve's start, the slot, the hand-off through Redis and the 2 s timeout all come first;
    # a loaded full run took more than 30 s once, and once more than 60 s: the rows and logs say why)
    try:
        row = wait_for(lambda: [r for r in cluster.rows() if r["status"] == "timed_out"], timeout=60)[0]
    except AssertionError as exc:
        rows = [{k: r[k] for k in ("status", "reason", "worker", "stop_request", "created_at", "ended_at")} for r in cluster.rows()]
        raise AssertionError(f"{exc}\nrows: {rows}\nserve:\n{serve.log()[-3000:]}\nworker:\n{worker.log()[-3000:]}") from None
    assert row["reason"] == "timeout" and row["stop_request"] == "timeout"  # the stop request says why (a term)
    assert row["worker"].startswith("w0@test")


def test_a_remote_run_killed_after_its_timeout_ends_timed_out(cluster: Cluster) -> None:
    """A run that cannot answer serve's SIGTERM (its pre_run stops the run's own process) is killed
    by its worker after the worker's kill grace: the row still says why it was stopped,
    ``timed_out`` (timeout), as on serve's own machine, not ``failed`` (worker_died)."""
    cluster.write_jobs(
        "jobs:\n  frozen:\n    schedule: in 1s\n    agent: false\n    timeout: 2s\n"
        "    pre_run: kill -STOP $PPID; sleep 60\n"
    )
    worker = cluster.worker("w0", concurrency=1, kill_grace=1)
    wait_ready_all(cluster, [worker])
    cluster.serve(kill_grace=60)  # serve's own escalation stays out of the way: the worker kills it
    row = wait_for(lambda: [r for r in cluster.rows() if r["status"] not in ("queued", "running")], timeout=60)[0]
    assert (row["status"], row["reason"], row["stop_request"]) == ("timed_out", "timeout", "timeout"), row
    assert "after the job's timeout of 2s" in row["error"], row["error"]
    # SIGKILLed: the row was the worker's to write (its log line comes just after the row)
    wait_for(lambda: f"run {row['id']} ended timed_out (exit -9)" in worker.log(), timeout=10, what="the worker's log line")


def test_worker_lost_mid_run_is_unknown_then_retried(cluster: Cluster) -> None:
    cluster.write_jobs(long_job(4))
    doomed = cluster.worker("doomed", concurrency=1)
    wait_ready_all(cluster, [doomed])
    cluster.serve()
    wait_for(lambda: [r for r in cluster.rows() if r["status"] == "running"], timeout=30, what="the run to start")
    doomed.kill_tree()  # the machine is gone: no heartbeat from now on
    spare = cluster.worker("spare", concurrency=1)
    first = wait_for(lambda: [r for r in cluster.rows() if r["attempt"] == 1 and r["status"] == "unknown"], timeout=30)[
        0
    ]
    assert first["reason"] == "worker_lost"
    # serve's heartbeat check names the worker; on this one host, a process's orphan check (serve's
    # or the spare worker's) may see the dead run's process first and say so: both are this verdict
    assert "doomed@test" in first["error"] or "worker process disappeared" in first["error"], first["error"]
    retry = wait_for(
        lambda: [r for r in cluster.rows() if r["attempt"] == 2 and r["status"] == "succeeded"], timeout=40
    )[0]
    assert retry["worker"].startswith("spare@test") and retry["slot"] == first["slot"]
    assert spare.proc is not None and spare.proc.poll() is None


def test_cancel_cuts_a_celery_workers_run(cluster: Cluster) -> None:
    """`runner runs cancel` on the serve machine: the worker's run process sees the request in the
    shared store, its 60 s pre_run is cut (the worker's own ``kill_grace``) and it ends
    ``interrupted/cancelled`` naming who asked."""
    mark = marker(60)
    cluster.write_jobs(f"jobs:\n  long:\n    schedule: in 1s\n    agent: false\n    pre_run: sleep {mark}\n")
    worker = cluster.worker("w0", concurrency=1, kill_grace=2)
    wait_ready_all(cluster, [worker])
    serve = cluster.serve()
    run = wait_for(lambda: [r for r in cluster.rows() if r["status"] == "running"], timeout=30, what="the run")[0]
    wait_for(lambda: sleeping(mark), timeout=30, what="the pre_run's sleep")
    res = serve.cli("runs", "cancel", run["id"])
    assert res.returncode == 0, res.stderr
    asked = time.monotonic()
    row = wait_for(lambda: [r for r in cluster.rows() if r["id"] == run["id"] and r["ended_at"]], timeout=30, interval=0.02)[0]
    took = time.monotonic() - asked
    assert (row["status"], row["reason"]) == ("interrupted", "cancelled"), row
    assert row["error"].startswith("cancelled by ") and "@" in row["error"]
    assert took < 3, f"the run ended {took:.1f}s after the cancel (kill_grace 2 s)"
    assert not sleeping(mark)


def test_say_reaches_a_celery_workers_model(cluster: Cluster) -> None:
    """`runner runs say` on the serve machine: the worker's run (another RUNNER_HOME, another
    project folder; the store is all they share) gives its model the message after the first tool
    call's result."""
    gate = "gate"
    cluster.write_jobs("jobs:\n  steered:\n    schedule: in 1s\n    prompt: go\n    toolsets: [terminal]\n")
    cluster.fake.add(
        Reply(tool_calls=[("terminal", {"command": f"while [ ! -e {gate} ]; do sleep 0.05; done; echo passed"})]),
        Reply(content="done"),
    )
    worker = cluster.worker("w0", concurrency=1)
    wait_ready_all(cluster, [worker])
    serve = cluster.serve()
    [run] = wait_for(
        lambda: cluster.rows(
            "SELECT r.id FROM runs r WHERE EXISTS (SELECT 1 FROM run_events e WHERE e.run_id = r.id AND e.kind = 'tool_call')"
        ),
        timeout=40,
        what="the run's first tool call",
    )
    res = serve.cli("runs", "say", run["id"], "Only the last hour matters.")
    assert res.returncode == 0, res.stderr
    time.sleep(1.0)  # the worker's watch sees it (a look every 0.1 s)
    (worker.root / gate).touch()
    wait_for(lambda: [r for r in cluster.rows() if r["id"] == run["id"] and r["status"] == "succeeded"], timeout=30)
    messages = cluster.fake.requests[1]["body"]["messages"]
    assert [m["role"] for m in messages[-3:]] == ["assistant", "tool", "user"]
    assert "Only the last hour matters." in messages[-1]["content"]
    [steer] = cluster.rows("SELECT outcome FROM control_requests WHERE kind = 'steer'")
    assert steer["outcome"] == "delivered"


def test_killed_workers_run_is_cut_once_declared_lost_so_its_side_effect_happens_once(cluster: Cluster) -> None:
    """kill -9 of a ``runner worker`` alone (issue 37): its run's process goes on as an orphan.
    Once serve declares the run lost and retries it elsewhere, the orphan's own watch sees the
    ended row and cuts its command (the ledger's fence): the file the command would append to after
    its sleep gets one line, the retry's, and no ``sleep`` of either is left."""
    side = cluster.tmp / "side-effect.txt"
    mark = marker(15)
    cluster.write_jobs(
        "jobs:\n  once:\n    schedule: in 1s\n    agent: false\n    retries: {attempts: 1, backoff: 0s}\n"
        f"    pre_run: 'sleep {mark} && echo $RUNNER_RUN_ID >> {side}'\n"
    )
    doomed = cluster.worker("doomed", concurrency=1)
    wait_ready_all(cluster, [doomed])
    cluster.serve()
    first = wait_for(
        lambda: [r for r in cluster.rows() if r["status"] == "running" and r["pid"]], timeout=30, what="the run"
    )[0]
    wait_for(lambda: sleeping(mark), timeout=30, what="the command's sleep")
    assert doomed.proc is not None
    doomed.proc.kill()  # the worker process alone: its run's process is left behind
    doomed.proc.wait(10)
    assert pid_alive(int(first["pid"]), first["pid_start"])
    cluster.worker("spare", concurrency=1)
    lost = wait_for(lambda: [r for r in cluster.rows() if r["attempt"] == 1 and r["status"] == "unknown"], timeout=30)
    assert lost[0]["reason"] == "worker_lost"
    wait_for(lambda: not pid_alive(int(first["pid"]), first["pid_start"]), timeout=10, what="the orphan run to stop")
    retry = wait_for(
        lambda: [r for r in cluster.rows() if r["attempt"] == 2 and r["status"] == "succeeded"], timeout=60
    )[0]
    assert [r for r in cluster.rows() if r["attempt"] == 1][0]["status"] == "unknown"  # the verdict stands
    wait_for(lambda: not sleeping(mark), timeout=10, what="no sleep left")
    assert side.read_text().split() == [retry["id"]]


def test_cut_off_worker_is_fenced_when_it_comes_back(cluster: Cluster) -> None:
    """A worker paused (cut off) past ``lost_after_s``: serve declares its run lost and retries it
    elsewhere. The stale run sees the verdict in the ledger and cuts itself while its worker is still
    paused (the run is fenced by the ledger, not by its parent); when the worker comes back it goes
    on serving, and no late result overwrites the ``unknown`` verdict the retry was based on."""
    cluster.write_jobs(long_job(60))
    paused = cluster.worker("paused", concurrency=1)
    wait_ready_all(cluster, [paused])
    cluster.serve()
    first = wait_for(
        lambda: [r for r in cluster.rows() if r["status"] == "running" and r["pid"]], timeout=30, what="the run"
    )[0]
    assert paused.proc is not None
    os.kill(paused.proc.pid, signal.SIGSTOP)  # the worker process stops; its run's process goes on
    try:
        lost = wait_for(
            lambda: [r for r in cluster.rows() if r["attempt"] == 1 and r["status"] == "unknown"], timeout=30
        )[0]
        assert lost["reason"] == "worker_lost"
        spare = cluster.worker("spare", concurrency=1)
        wait_for(
            lambda: not pid_alive(int(first["pid"]), first["pid_start"]), timeout=20, what="the stale run to cut itself"
        )
        wait_for(lambda: [r for r in cluster.rows() if r["attempt"] == 2 and r["worker"]], timeout=40)
    finally:
        os.kill(paused.proc.pid, signal.SIGCONT)
    time.sleep(1.0)  # what the stale run's worker writes once it runs again, if anything, is written by now
    again = [r for r in cluster.rows() if r["attempt"] == 1][0]
    assert (again["status"], again["reason"]) == ("unknown", "worker_lost")
    second = [r for r in cluster.rows() if r["attempt"] == 2][0]
    assert second["worker"].startswith("spare@test") and second["status"] in ("queued", "running")
    assert spare.proc is not None and spare.proc.poll() is None
    assert paused.proc.poll() is None, paused.log()[-2000:]  # the worker that came back still serves


def test_broker_restart(cluster: Cluster, redis_server: Redis) -> None:
    cluster.fake.default = Reply(content="hi")
    cluster.write_jobs(EVERY)
    workers = [cluster.worker(f"w{i}", concurrency=2) for i in range(2)]
    wait_ready_all(cluster, workers)
    serve = cluster.serve()
    wait_for(lambda: len([r for r in cluster.rows() if r["status"] == "succeeded"]) >= 2, timeout=40)
    redis_server.stop()  # no persistence: what it held is gone
    time.sleep(2)
    redis_server.start()
    restarted = time.time()
    wait_for(
        lambda: [r for r in cluster.rows() if r["status"] == "succeeded" and _epoch(r["created_at"]) > restarted + 1],
        timeout=60,
        what="runs after the broker restart",
    )
    serve.stop()
    rows = cluster.rows()
    assert max(Counter((r["job"], r["slot"], r["attempt"]) for r in rows).values()) == 1
    for m in workers:
        assert m.proc is not None and m.proc.poll() is None, m.log()[-2000:]


def _epoch(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text).timestamp()


def test_celery_worker_killed_after_turn_3_resumes_from_the_journal(cluster: Cluster, receiver: Receiver) -> None:
    """Durable runs (issue 33) under the Celery executor: the machine whose ``runner worker`` runs a
    6-turn run is killed (SIGKILL of its whole process tree) while turn 4 waits for the model.
    Serve declares the run lost (``unknown/worker_lost``) and makes a new attempt at once, which a
    spare worker (another machine: the store is all they share) resumes from the journal: turns
    1-3 are not asked again, their commands do not run again, the output is delivered once."""
    work = cluster.tmp / "work"  # one folder both machines see (as a shared volume would be)
    work.mkdir()
    marker = work / "marker.txt"
    cluster.write_jobs(
        "jobs:\n  durable:\n    schedule: in 1s\n    prompt: go\n    toolsets: [terminal]\n"
        f"    workdir: {work}\n    deliver: ['webhook:{receiver.url}']\n"
    )
    for n in (1, 2, 3):
        cluster.fake.add(call("terminal", {"command": f"echo turn-{n} >> {marker}"}))
    cluster.fake.add(hang(60))  # turn 4's first request: the machine is gone while it waits
    for n in (4, 5):
        cluster.fake.add(call("terminal", {"command": f"echo turn-{n} >> {marker}"}))
    cluster.fake.add(final("all six turns done"))
    doomed = cluster.worker("doomed", concurrency=1)
    wait_ready_all(cluster, [doomed])
    cluster.serve()
    wait_for(lambda: len(cluster.fake.requests) >= 4, timeout=60, what="turn 4's request")
    doomed.kill_tree()
    spare = cluster.worker("spare", concurrency=1)
    runs = wait_for(
        lambda: (r := cluster.rows()) and len(r) == 2 and r[1]["status"] == "succeeded" and r,
        timeout=60,
        what="the resumed attempt to succeed",
    )
    assert [(r["attempt"], r["status"], r["reason"]) for r in runs] == [(1, "unknown", "worker_lost"), (2, "succeeded", None)]
    assert runs[1]["parent_run"] == runs[0]["id"] and runs[1]["worker"].startswith("spare@test")
    assert marker.read_text().splitlines() == [f"turn-{n}" for n in range(1, 6)]  # each command ran once
    # turns 1-3 asked once; turn 4's first request was never answered and was asked again; 5, 6 once
    assert [len(r["body"]["messages"]) for r in cluster.fake.requests] == [2, 4, 6, 8, 8, 10, 12]
    wait_for(lambda: receiver.requests, timeout=10, what="the delivery")
    time.sleep(0.5)
    assert len(receiver.requests) == 1
    assert receiver.requests[0].headers["idempotency-key"] == f"{runs[0]['id']}:deliver:1"
    [resumed] = cluster.rows("SELECT payload FROM run_events WHERE kind = 'resumed'")
    assert json.loads(resumed["payload"])["turn"] == 3
    assert spare.proc is not None and spare.proc.poll() is None
