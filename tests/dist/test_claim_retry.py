"""A ``runner worker``'s claim across a PostgreSQL restart (issue 37): the worker's connections
all died with the server, so its first claim after the restart fails; it tries again (backoff,
within a bound) instead of dropping the message, so the run is claimed and runs at once and no
later slot of the job is skipped as overlapping a row left ``queued``."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from tests.dist.conftest import Cluster, wait_ready_all
from tests.servehelp import wait_for

JOBS = """
jobs:
  tick:
    schedule: every 2s
    agent: false
    pre_run: echo tick
    overlap: skip
"""


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def test_claim_across_a_postgresql_restart(pg_cluster: Cluster, pg_server: Any) -> None:
    cluster = pg_cluster
    cluster.write_jobs(JOBS)
    worker = cluster.worker("w1", concurrency=2, resend_s=60)  # no resend hides a dropped message
    wait_ready_all(cluster, [worker])
    serve = cluster.serve(resend_s=60)
    succeeded = lambda: len([r for r in cluster.rows() if r["status"] == "succeeded"])  # noqa: E731
    wait_for(lambda: succeeded() >= 3, timeout=40)
    first_restart = None
    # until a restart meets a claim: the worker's heartbeat thread reads the shared store every 0.5 s
    # and often meets the cut connection first (a full run once saw 6 restarts in a row go that way)
    for _ in range(12):
        before = succeeded()
        wait_for(lambda before=before: succeeded() > before, timeout=10, what="a run to end")
        # right after a run ended: the worker's threads sit idle on connections the restart cuts, so
        # the next message's claim is the first statement one of them sends
        pg_server.restart()
        restarted = time.time()
        first_restart = first_restart or restarted
        wait_for(
            lambda since=restarted: (
                len([r for r in cluster.rows() if r["status"] == "succeeded" and _epoch(r["created_at"]) > since]) >= 5
            ),
            timeout=40,
            what="runs to succeed after the restart",
        )
        if "the claim went through at try" in worker.log():
            break
    assert first_restart is not None
    restarted = first_restart
    time.sleep(1.0)
    rows = [r for r in cluster.rows() if _epoch(r["created_at"]) > restarted - 2]
    stuck = [r for r in rows if r["status"] == "queued" and _epoch(r["created_at"]) < time.time() - 5]
    assert not stuck, stuck  # a message dropped at a failed claim leaves its row queued
    skipped = [r for r in rows if r["status"] == "skipped"]
    assert not skipped, skipped  # later slots "overlap" the row nobody runs
    for m in (serve, worker):
        assert m.proc is not None and m.proc.poll() is None, f"{m.name} died:\n{m.log()[-3000:]}"
    log = worker.log()
    assert "raised unexpected" not in log, log[-3000:]
    assert "the claim went through at try" in log, log[-3000:]  # the fault was met, and ridden out
    serve.stop()
    worker.stop(timeout=30)
