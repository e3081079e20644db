"""Many scheduled fires across three ``runner worker``s: no (job, slot) runs twice, none is lost.
(The bench, tests/bench/bench_dist.py, does 1,000; this is what runs in well under a minute.)"""

from __future__ import annotations

from collections import Counter
from datetime import datetime

import pytest

from runner.testing.fakeopenai import Reply
from tests.dist.conftest import Cluster, wait_ready_all
from tests.servehelp import wait_for

JOBS = 20


@pytest.mark.slow
def test_many_fires_across_three_workers_once_each(cluster: Cluster) -> None:
    cluster.fake.default = Reply(content="done")
    body = "".join(
        f'  j{i:02d}:\n    schedule: every 1s\n    prompt: "hi {{{{ run.id }}}}"\n    toolsets: []\n'
        "    memory: off\n    overlap: allow\n    catchup: all\n"
        for i in range(JOBS)
    )
    cluster.write_jobs("jobs:\n" + body)
    workers = [cluster.worker(f"w{i}", concurrency=4) for i in range(3)]
    wait_ready_all(cluster, workers)
    serve = cluster.serve(max_parallel=12)
    wait_for(lambda: len(cluster.rows()) >= JOBS * 10, timeout=60, what=f"{JOBS * 10} fires")
    serve.stop()
    wait_for(
        lambda: not cluster.rows("SELECT id FROM runs WHERE status IN ('queued', 'running') AND worker IS NOT NULL"),
        timeout=60,
    )
    rows = cluster.rows()
    assert max(Counter((r["job"], r["slot"], r["attempt"]) for r in rows).values()) == 1
    for i in range(JOBS):
        slots = sorted(datetime.fromisoformat(r["slot"]) for r in rows if r["job"] == f"j{i:02d}")
        gaps = [round((b - a).total_seconds()) for a, b in zip(slots, slots[1:], strict=False)]
        assert set(gaps) <= {1}, (f"j{i:02d}", gaps)  # every second's slot has its row: none lost
    ran = [r for r in rows if r["worker"] not in (None, "-")]
    assert all(r["status"] == "succeeded" for r in ran), Counter(r["status"] for r in ran)
    assert len({r["worker"] for r in ran}) == 3  # every worker took runs
    asked = Counter(
        part.split()[-1]
        for q in cluster.fake.requests
        for m in q["body"].get("messages", [])
        if m.get("role") == "user" and isinstance((part := m.get("content")), str) and part.startswith("hi ")
    )
    assert asked and max(asked.values()) == 1  # no run asked the model twice
    assert set(asked) == {r["id"] for r in ran}
