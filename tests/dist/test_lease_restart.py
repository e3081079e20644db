"""Leadership that survives the store (issue 37): a leader and a standby ``runner serve`` on one
PostgreSQL store, a job due every second, and ``pg_ctl restart -m fast`` three times. Each time one
of the two leads again within the lease + 2 s (neither exits), no (job, slot) has two rows and
no slot from the first to the last is missing (``catchup: all``: a slot due while nobody could
write is caught up by whoever leads next)."""

from __future__ import annotations

import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from runner.store import StoreUnavailable
from tests.dist.conftest import Cluster, Machine, _cluster
from tests.servehelp import wait_for

pytestmark = pytest.mark.slow

LEASE_S = 3
JOBS = """
jobs:
  tick:
    schedule: every 1s
    agent: false
    pre_run: echo tick
    overlap: allow
    catchup: all
"""
CONFIG = f"""
serve:
  heartbeat_s: 0.5
  shutdown_grace: 3
  kill_grace: 0.5
  lease_s: {LEASE_S}
"""


@pytest.fixture
def local_pg_cluster(tmp_path: Path, pg_url: str) -> Iterator[Cluster]:
    """Serves on a PostgreSQL store, each running its runs in its own pool (no broker)."""
    yield from _cluster(tmp_path, "redis://127.0.0.1:9/0", pg_url)


def _serve(cluster: Cluster, name: str) -> Machine:
    m = cluster.machine(name)
    (m.home / "config.yaml").write_text(textwrap.dedent(CONFIG))  # the local pool: no executor
    return m.start("serve")


def _rows(cluster: Cluster) -> list[dict[str, Any]]:
    try:
        return cluster.rows()
    except StoreUnavailable:
        return []  # the server is coming up: ask again


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def test_leader_and_standby_survive_three_postgresql_restarts(local_pg_cluster: Cluster, pg_server: Any) -> None:
    cluster = local_pg_cluster
    cluster.write_jobs(JOBS)
    first = _serve(cluster, "serve-a")
    cluster.wait_ready(first, "serve started", timeout=60)
    second = _serve(cluster, "serve-b")
    cluster.wait_ready(second, "standing by", timeout=60)
    wait_for(lambda: len(_rows(cluster)) >= 3, timeout=30, what="fires by the leader")
    resumed: list[float] = []
    for _ in range(3):
        pg_server.run_ctl("restart", mode="fast")  # every connection is cut; -w: back up on return
        up = time.time()
        fresh = wait_for(
            lambda: [r for r in _rows(cluster) if _epoch(r["created_at"]) > up],
            timeout=60,
            what="a fire after the restart",
        )
        resumed.append(min(_epoch(r["created_at"]) for r in fresh) - up)
        for m in (first, second):
            assert m.proc is not None and m.proc.poll() is None, f"{m.name} exited:\n{m.log()[-3000:]}"
        time.sleep(2)  # the leader settles (the other one stands by) before the next restart
    listed = first.cli("jobs", "list")
    assert listed.returncode == 0, listed.stderr
    assert "leader:" in listed.stdout and "since" in listed.stdout, listed.stdout
    for m in (first, second):
        m.stop()
        assert m.proc is not None and m.proc.returncode == 0, f"{m.name}:\n{m.log()[-3000:]}"
    print(f"scheduling resumed {[round(r, 2) for r in resumed]} s after each restart")
    assert max(resumed) <= LEASE_S + 2, resumed
    rows = cluster.rows()
    assert max(Counter((r["job"], r["slot"], r["attempt"]) for r in rows).values()) == 1
    slots = sorted(datetime.fromisoformat(r["slot"]) for r in rows if r["attempt"] == 1)
    seconds = [round((s - slots[0]).total_seconds()) for s in slots]
    missing = sorted(set(range(seconds[-1] + 1)) - set(seconds))
    assert not missing, f"slots with no row (seconds after the first): {missing}"
    stuck = [r for r in rows if r["status"] in ("queued", "running")]
    assert not stuck, stuck
