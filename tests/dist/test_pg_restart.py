"""A PostgreSQL restart while runs are going on workers: serve and the workers stay up, runs in
flight end cleanly (succeeded, or failed / unknown with a reason), new slots run again once the
server is back, no (job, slot, attempt) runs twice and nothing is left ``running``."""

from __future__ import annotations

import time
from collections import Counter
from datetime import datetime
from typing import Any

from tests.dist.conftest import Cluster, wait_ready_all
from tests.servehelp import wait_for

JOBS = """
jobs:
  tick:
    schedule: every 1s
    agent: false
    pre_run: sleep 1.5; echo tick
    overlap: allow
    retries: {attempts: 1, backoff: 0s}
"""


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def test_postgresql_restart_mid_run(pg_cluster: Cluster, pg_server: Any) -> None:
    cluster = pg_cluster
    cluster.write_jobs(JOBS)
    workers = [cluster.worker(f"w{i}", concurrency=3) for i in range(2)]
    wait_ready_all(cluster, workers)
    serve = cluster.serve()
    wait_for(lambda: len([r for r in cluster.rows() if r["status"] == "succeeded"]) >= 2, timeout=40)
    wait_for(lambda: [r for r in cluster.rows() if r["status"] == "running"], timeout=20, what="a run in flight")
    pg_server.run_ctl("restart", mode="fast")  # every connection is cut, mid-run
    restarted = time.time()
    pg_server.wait_ready()
    wait_for(
        lambda: [r for r in cluster.rows() if r["status"] == "succeeded" and _epoch(r["created_at"]) > restarted + 1],
        timeout=60,
        what="new runs to succeed after the restart",
    )
    for m in [serve, *workers]:
        assert m.proc is not None and m.proc.poll() is None, f"{m.name} died:\n{m.log()[-3000:]}"
    serve.stop()
    for m in workers:
        m.stop(timeout=30)
    rows = cluster.rows()
    assert max(Counter((r["job"], r["slot"], r["attempt"]) for r in rows).values()) == 1
    stuck = [r for r in rows if r["status"] == "running"]
    assert not stuck, stuck
    for r in rows:
        if r["status"] in ("failed", "unknown"):
            assert r["reason"], r
