"""A standby scheduler: two ``runner serve`` against one store; one leads (the scheduler lease),
the other takes over when the leader dies, and no slot is fired twice or lost."""

from __future__ import annotations

import signal
import time
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from runner.clock import iso, utcnow
from runner.store import Store
from runner.store.lease import SCHEDULER, SqliteLease, lease_holder, open_lease
from tests.dist.conftest import Cluster, wait_ready_all
from tests.servehelp import wait_for

EVERY = """
jobs:
  tick:
    schedule: every 1s
    agent: false
    pre_run: echo tick
    overlap: allow
    catchup: all
"""


def test_lease_has_one_holder_until_it_expires(tmp_path) -> None:
    a_store = Store.open(tmp_path / "runner.db")
    b_store = Store.open(tmp_path / "runner.db")
    a = SqliteLease(a_store, SCHEDULER, 10, holder="a:1")
    b = SqliteLease(b_store, SCHEDULER, 10, holder="b:2")
    now = utcnow()
    assert a.acquire(now) and not b.acquire(now)
    assert a.renew(now + timedelta(seconds=5)) and not b.acquire(now + timedelta(seconds=14))
    assert b.acquire(now + timedelta(seconds=16))  # a's renewal ran out at +15 s
    assert not a.renew(now + timedelta(seconds=16))  # a lost it, and learns so
    holder = lease_holder(a_store)
    assert holder is not None and holder.holder == "b:2"
    b.release()
    assert lease_holder(a_store) is None and a.acquire()


def test_lease_on_either_store_one_holder_and_takeover(where: Any) -> None:
    """``open_lease`` on SQLite and PostgreSQL: one holder; a released lease is free at once; a
    holder that stopped renewing past its expiry loses it to the next taker."""
    a_store, b_store = Store.open(where), Store.open(where)
    try:
        # 3 s: long enough that a's hold does not run out between two statements on a loaded machine
        a = open_lease(a_store, SCHEDULER, 3, holder="a:1")
        b = open_lease(b_store, SCHEDULER, 3, holder="b:2")
        assert a.acquire() and not b.acquire()
        assert a.renew() and not b.acquire()
        holder = lease_holder(b_store)
        assert holder is not None and holder.holder == a.holder and holder.live()
        a.release()
        assert b.acquire() and not a.acquire()
        time.sleep(3.2)  # b stops renewing (a pause): past its expiry the next taker gets it
        assert wait_for(lambda: a.acquire(), timeout=10)
        assert not b.renew()  # b learns it lost the lease at its next renewal
    finally:
        a_store.close()
        b_store.close()


def test_pg_leader_keeps_its_lease_over_a_server_restart(pg_server: Any, pg_url: str) -> None:
    """A PostgreSQL restart drops the leader's connection and its advisory lock with it: the next
    renewal takes the lock again (nobody else did meanwhile), so one database restart does not
    stop the schedule; a standby that got there first would keep it."""
    from runner.store import StoreUnavailable
    from runner.store.dialect import PgURL

    a_store, b_store = Store.open(PgURL(pg_url)), Store.open(PgURL(pg_url))
    try:
        a = open_lease(a_store, SCHEDULER, 30, holder="a:1")
        b = open_lease(b_store, SCHEDULER, 30, holder="b:2")
        assert a.acquire() and not b.acquire()
        pg_server.run_ctl("restart", mode="fast")
        pg_server.wait_ready()

        def renewed() -> bool:
            try:
                return a.renew()
            except StoreUnavailable:
                return False  # the server is still coming up: the next renewal tries again

        assert wait_for(renewed, timeout=20)
        assert not b.acquire()
        holder = lease_holder(b_store)
        assert holder is not None and holder.holder == "a:1"
    finally:
        a_store.close()
        b_store.close()


def _slots(cluster: Cluster) -> Counter[tuple[str, str, int]]:
    return Counter((r["job"], r["slot"], r["attempt"]) for r in cluster.rows())


def _contiguous(cluster: Cluster) -> None:
    """Every second from the first slot to the last has exactly one row (run or missed)."""
    slots = sorted(datetime.fromisoformat(r["slot"]) for r in cluster.rows() if r["attempt"] == 1)
    seconds = [round((s - slots[0]).total_seconds()) for s in slots]
    assert seconds == list(range(len(seconds))), seconds


def test_standby_takes_over_when_the_leader_dies(cluster: Cluster) -> None:
    cluster.write_jobs(EVERY)
    workers = [cluster.worker(f"w{i}", concurrency=2) for i in range(2)]
    wait_ready_all(cluster, workers)
    leader = cluster.serve("serve-a")
    cluster.wait_ready(leader, "serve started")
    standby = cluster.serve("serve-b")
    cluster.wait_ready(standby, "standing by")
    wait_for(lambda: len(cluster.rows()) >= 3, timeout=30, what="fires by the leader")
    assert "serve started" not in standby.log()
    listed = leader_line(cluster)
    assert "leader:" in listed
    killed = time.monotonic()
    leader.kill_tree()
    cluster.wait_ready(standby, "this serve leads now", timeout=20)
    took = time.monotonic() - killed
    assert took <= 3 + 2 + 1, took  # lease_s 3 (+ the standby's poll and start)
    before = len(cluster.rows())
    wait_for(lambda: len(cluster.rows()) >= before + 3, timeout=30, what="fires by the new leader")
    standby.stop()
    assert max(_slots(cluster).values()) == 1
    _contiguous(cluster)
    stuck = [r for r in cluster.rows() if r["status"] in ("queued", "running")]
    assert not stuck


def test_a_paused_leader_that_lost_the_lease_steps_down_and_stands_by(cluster: Cluster) -> None:
    cluster.write_jobs(EVERY)
    workers = [cluster.worker("w0", concurrency=4)]
    wait_ready_all(cluster, workers)
    first = cluster.serve("serve-a")
    cluster.wait_ready(first, "serve started")
    second = cluster.serve("serve-b")
    cluster.wait_ready(second, "standing by")
    assert first.proc is not None
    first.proc.send_signal(signal.SIGSTOP)  # a long GC pause, a frozen VM: its lease runs out
    cluster.wait_ready(second, "this serve leads now", timeout=20)
    time.sleep(1.5)
    first.proc.send_signal(signal.SIGCONT)  # it wakes up thinking it leads, with slots due
    # it steps down before firing anything and stands by (it does not exit: a standby is kept)
    cluster.wait_ready(first, "stepped down", timeout=20)
    cluster.wait_ready(first, "standing by: ", timeout=20)
    time.sleep(2)
    assert first.proc.poll() is None, first.log()[-3000:]
    second.stop()  # a clean stop hands over at once: the paused one leads again
    assert second.proc is not None and second.proc.returncode == 0, second.log()[-3000:]
    wait_for(lambda: first.log().count("serve started") == 2, timeout=20, what="serve-a to lead again")
    before = len(cluster.rows())
    wait_for(lambda: len(cluster.rows()) >= before + 2, timeout=30, what="fires by serve-a again")
    first.stop()
    assert first.proc.returncode == 0, first.log()[-3000:]
    assert max(_slots(cluster).values()) == 1
    _contiguous(cluster)


def test_two_schedulers_writing_the_same_slot_make_one_row(tmp_path) -> None:
    """Even with two leaders at once (no lease), the ledger's (job, slot, attempt) identity lets
    only one fire through."""
    import sqlite3

    from runner.statuses import RunStatus, Trigger
    from runner.store import ledger

    a = Store.open(tmp_path / "runner.db")
    b = Store.open(tmp_path / "runner.db")
    slot = utcnow().replace(microsecond=0)
    ledger.open_run(a, job="tick", trigger=Trigger.SCHEDULE, status=RunStatus.QUEUED, slot=slot)
    try:
        ledger.open_run(b, job="tick", trigger=Trigger.SCHEDULE, status=RunStatus.QUEUED, slot=slot)
    except sqlite3.IntegrityError:
        pass
    else:
        raise AssertionError("the second scheduler fired the same slot")
    assert len(a.query("SELECT id FROM runs")) == 1


def leader_line(cluster: Cluster) -> str:

    m = cluster.machines[0]
    out = m.cli("jobs", "list")
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_pg_holder_repairs_a_row_naming_someone_else(pg_url: str) -> None:
    """Holding the advisory lock is leading: a holder whose row names another (a taker lost its
    session between the lock and the row, an older serve wrote it) writes the row again at its
    renewal instead of calling the lease lost forever."""
    from runner.store.dialect import PgURL

    store, other = Store.open(PgURL(pg_url)), Store.open(PgURL(pg_url))
    try:
        a = open_lease(store, SCHEDULER, 30, holder="a:1")
        b = open_lease(other, SCHEDULER, 30, holder="b:2")
        assert a.acquire()
        other.execute("UPDATE leases SET holder='b:2', pid=2 WHERE name=?", (SCHEDULER,))
        assert a.renew()
        holder = lease_holder(other)
        assert holder is not None and holder.holder == "a:1" and holder.live()
        assert not b.acquire()  # the lock is a's: b cannot lead on the strength of a row
        other.execute("DELETE FROM leases WHERE name=?", (SCHEDULER,))
        assert a.renew() and lease_holder(other) is not None
    finally:
        store.close()
        other.close()


def test_pg_eviction_ends_the_session_holding_the_lock(pg_url: str) -> None:
    """A holder that stopped renewing past its row's expiry is ended by the next taker: the session
    that holds the lock (``pg_locks``, named by its holder id), whatever server pid the row kept
    (after a restart that one is long gone)."""
    from runner.store.dialect import PgURL

    store, other = Store.open(PgURL(pg_url)), Store.open(PgURL(pg_url))
    try:
        a = open_lease(store, SCHEDULER, 30, holder="a:1")
        b = open_lease(other, SCHEDULER, 30, holder="b:2")
        assert a.acquire() and not b.acquire()
        past = iso(utcnow() - timedelta(seconds=5))
        other.execute("UPDATE leases SET backend=1, expires_at=? WHERE name=?", (past, SCHEDULER))
        assert wait_for(b.acquire, timeout=10)
        holder = lease_holder(store)
        assert holder is not None and holder.holder == "b:2"
        assert not a.renew()  # a learns it lost the lease at its next renewal
    finally:
        store.close()
        other.close()


def test_who_leads_in_metrics_and_jobs_list(where: Any) -> None:
    from runner.web.metrics import registry, render

    store = Store.open(where)
    try:
        lease = open_lease(store, SCHEDULER, 1, holder="a:1")
        assert lease.acquire()
        text = render(registry(store))[0].decode()
        assert 'runner_scheduler_leader{holder="a:1"' in text and "} 1.0" in text.split("runner_scheduler_leader{")[1]
        assert "runner_scheduler_leader_since_seconds{" in text
        holder = lease_holder(store)
        assert holder is not None and holder.describe().startswith(f"leader: {holder.host} (pid {holder.pid}) since ")
        time.sleep(1.2)  # it stops renewing: nobody leads
        text = render(registry(store))[0].decode()
        assert "} 0.0" in text.split("runner_scheduler_leader{")[1]
        assert holder.describe().startswith(
            f"no leader: the scheduler lease of {holder.host} (pid {holder.pid}) ran out"
        )
    finally:
        store.close()


def test_pg_a_lock_held_without_a_row_is_taken_after_a_ttl(pg_url: str) -> None:
    """A session that holds the lock but never wrote a row (it died between the two on an older
    serve, or holds it by mistake) cannot keep everyone from leading: after a ttl it is ended."""
    import psycopg

    from runner.store.dialect import PgURL
    from runner.store.lease import PgLease

    store = Store.open(PgURL(pg_url))
    squatter = psycopg.connect(pg_url, autocommit=True)
    try:
        b = open_lease(store, SCHEDULER, 1, holder="b:2")
        assert isinstance(b, PgLease)
        squatter.execute("SELECT pg_advisory_lock(%s)", (b.key,))
        assert not b.acquire()  # no row yet: it may be about to write one
        assert wait_for(b.acquire, timeout=10)
        assert squatter.broken or squatter.closed or _dead(squatter)
        holder = lease_holder(store)
        assert holder is not None and holder.holder == "b:2"
    finally:
        squatter.close()
        store.close()


def _dead(conn: Any) -> bool:
    try:
        conn.execute("SELECT 1")
    except Exception:  # noqa: BLE001 - the server ended it: any error says so
        return True
    return False
