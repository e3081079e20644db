"""`runner serve` and its runs: overlap policies, max_parallel queueing, retries with backoff,
pausing after failures and `runner jobs pause | resume`."""

from __future__ import annotations

import json
import time
from datetime import datetime

import pytest

from tests.servehelp import job_rows, rows, serve_factory, ts, wait_for, write_config


@pytest.fixture
def serve(project):
    yield from serve_factory(project)


FINAL = ("succeeded", "failed", "timed_out", "interrupted", "skipped", "missed", "unknown")


def _intervals(run_rows: list[dict]) -> list[tuple[datetime, datetime]]:
    return [(ts(r["started_at"]), ts(r["ended_at"])) for r in run_rows if r["started_at"] and r["ended_at"]]


def _max_concurrent(spans: list[tuple[datetime, datetime]]) -> int:
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans], key=lambda e: (e[0], e[1]))
    best = now = 0
    for _, delta in events:
        now += delta
        best = max(best, now)
    return best


@pytest.mark.slow
def test_overlap_policies(project, serve):
    write_config(project, max_parallel=10)
    body = "    schedule: every 1s\n    agent: false\n    pre_run: sleep 2.2\n"
    project.write_jobs(
        "jobs:\n" + "".join(f"  {p}:\n{body}    overlap: {p}\n" for p in ("skip", "queue", "allow", "replace"))
    )
    daemon = serve().started()
    time.sleep(6.5)

    def queued_run_done() -> bool:  # a run that waited for the one before it, and then ran to its end
        return any(r["status"] == "succeeded" and r["waited_s"] >= 1.0 for r in job_rows(project.home, "queue"))

    # on a loaded machine the second 2.2 s queue run may still be going at 6.5 s: a stop now would
    # interrupt it (reason shutdown), not show the policy
    wait_for(queued_run_done, 20, what="the queued run to finish")
    assert daemon.stop() == 0
    by = {
        p: [r for r in job_rows(project.home, p) if r["reason"] != "shutdown"]
        for p in ("skip", "queue", "allow", "replace")
    }
    # skip: later slots are recorded skipped while one runs; never two at once
    skip = by["skip"]
    assert any(r["status"] == "skipped" and r["reason"] == "overlap" for r in skip)
    assert any(r["status"] == "succeeded" for r in skip)
    assert _max_concurrent(_intervals(skip)) == 1
    # queue: at most one waits (it starts when the previous ends), the rest are skipped
    queue = by["queue"]
    assert any(r["status"] == "skipped" and r["reason"] == "overlap" for r in queue)
    waited = [r for r in queue if r["status"] == "succeeded" and r["waited_s"] >= 1.0]
    assert waited, queue
    assert _max_concurrent(_intervals(queue)) == 1
    # allow: runs overlap
    allow = by["allow"]
    assert not any(r["status"] == "skipped" for r in allow)
    assert _max_concurrent(_intervals(allow)) >= 2
    # replace: each new slot interrupts the running one, then starts
    replace = by["replace"]
    interrupted = [r for r in replace if r["status"] == "interrupted" and r["reason"] == "replaced"]
    assert len(interrupted) >= 3, replace
    assert _max_concurrent(_intervals(replace)) == 1
    assert not any(r["status"] == "succeeded" for r in replace)


@pytest.mark.slow
def test_max_parallel_queues_in_slot_order(project, serve):
    write_config(project, max_parallel=2)
    body = "    schedule: every 3s\n    agent: false\n    pre_run: sleep 1.5\n"
    project.write_jobs("jobs:\n" + "".join(f"  p{i}:\n{body}" for i in (1, 2, 3)))
    daemon = serve().started()
    first = wait_for(
        lambda: (
            (r := rows(project.home, "SELECT * FROM runs ORDER BY slot, job"))
            and len(r) >= 3
            and all(x["status"] == "succeeded" for x in r[:3])
            and r[:3]
        ),
        15,
    )
    assert daemon.stop() == 0
    assert len({r["slot"] for r in first}) == 1
    assert first[2]["waited_s"] >= 1.2 and first[0]["waited_s"] < 0.3 and first[1]["waited_s"] < 0.3
    assert _max_concurrent(_intervals(first)) == 2
    assert ts(first[2]["started_at"]) >= min(ts(first[0]["ended_at"]), ts(first[1]["ended_at"]))


@pytest.mark.slow
def test_retries_with_exponential_backoff(project, serve):
    write_config(project)
    project.write_jobs(
        "jobs:\n  flaky:\n    schedule: in 1s\n    agent: false\n    pre_run: exit 3\n"
        "    retries: {attempts: 2, backoff: 1s}\n"
    )
    daemon = serve().started()
    attempts = wait_for(
        lambda: (r := job_rows(project.home, "flaky")) and len(r) == 3 and r[2]["status"] in FINAL and r, 15
    )
    assert daemon.stop() == 0
    assert [r["attempt"] for r in attempts] == [1, 2, 3]
    assert all(r["status"] == "failed" for r in attempts)
    assert len({r["slot"] for r in attempts}) == 1
    first = attempts[0]
    assert [r["parent_run"] for r in attempts] == [None, first["id"], first["id"]]
    assert [r["trigger"] for r in attempts] == ["schedule", "retry", "retry"]
    gap1 = (ts(attempts[1]["started_at"]) - ts(attempts[0]["ended_at"])).total_seconds()
    gap2 = (ts(attempts[2]["started_at"]) - ts(attempts[1]["ended_at"])).total_seconds()
    assert 0.95 <= gap1 < 2.5 and 1.95 <= gap2 < 3.5, (gap1, gap2)  # backoff 1 s, then 2 s


@pytest.mark.slow
def test_pause_after_failures_then_resume_and_manual_pause(project, serve):
    write_config(project)
    project.write_jobs(
        "jobs:\n  bad:\n    schedule: every 1s\n    agent: false\n    pre_run: exit 1\n    pause_after_failures: 2\n"
    )
    daemon = serve().started()
    state = wait_for(lambda: rows(project.home, "SELECT * FROM job_state WHERE job='bad' AND paused=1"), 10)[0]
    assert "paused after 2 consecutive failed slots" in state["paused_reason"]
    time.sleep(1.5)
    failed = job_rows(project.home, "bad")
    assert [r["status"] for r in failed] == ["failed", "failed"]
    listed = json.loads(project.cli("jobs", "list", "--json").output)[0]
    assert listed["paused"] is True and listed["next_fire"] is None and listed["failure_streak"] == 2
    assert "runner jobs resume bad" in project.cli("jobs", "list").output
    res = project.cli("jobs", "resume", "bad")
    assert res.exit_code == 0 and "resumed bad" in res.output
    wait_for(lambda: len(job_rows(project.home, "bad")) > 2, 15, what="bad to fire again after resume")
    wait_for(lambda: rows(project.home, "SELECT * FROM job_state WHERE job='bad' AND paused=1"), 15)
    assert len(job_rows(project.home, "bad")) == 4
    # a manual pause of a good job, kept over jobs.yaml until resumed
    project.write_jobs("jobs:\n  good:\n    schedule: every 1s\n    agent: false\n    pre_run: echo ok\n")
    wait_for(lambda: job_rows(project.home, "good"), 15)
    assert project.cli("jobs", "pause", "good").exit_code == 0
    # serve reads pause flags every second and logs what it saw; from then on it fires nothing
    wait_for(lambda: "good paused (paused with runner jobs pause)" in daemon.log(), 15, what="serve to see the pause")
    count = len(job_rows(project.home, "good"))
    time.sleep(2)
    assert len(job_rows(project.home, "good")) == count
    assert "paused with runner jobs pause" in daemon.log()
    assert project.run("jobs", "pause", "nope").returncode == 2
    assert daemon.stop() == 0


@pytest.mark.slow
def test_pending_retry_survives_a_restart(project, serve):
    write_config(project)
    project.write_jobs(
        "jobs:\n  flaky:\n    schedule: in 1s\n    agent: false\n    pre_run: exit 3\n"
        "    retries: {attempts: 1, backoff: 3s}\n"
    )
    first = serve().started()
    wait_for(lambda: len(job_rows(project.home, "flaky")) == 2, 10, what="the retry row")
    assert first.stop() == 0
    failed, retry = job_rows(project.home, "flaky")
    assert failed["status"] == "failed" and retry["status"] == "queued" and retry["not_before"]
    second = serve().started()
    assert "1 queued runs adopted" in second.log()
    done = wait_for(lambda: (r := job_rows(project.home, "flaky")[1]) and r["status"] in FINAL and r, 10)
    assert done["status"] == "failed" and done["attempt"] == 2 and done["parent_run"] == failed["id"]
    assert ts(done["started_at"]) >= ts(retry["not_before"])
    assert second.stop() == 0


def test_the_failure_streak_counts_resets_and_a_success_at_zero_takes_no_write_lock(where, any_store):
    """In-process, SQLite and PostgreSQL: ``record_slot_result`` (serve calls it for every finished
    scheduled run) counts consecutive failures, a success resets them, and a success while the
    streak is already 0 takes no write lock: it returns while another connection holds it."""
    import threading

    from runner.serve.state import record_slot_result
    from runner.store import Store

    assert record_slot_result(any_store, "j", failed=False) == 0  # first result: the row is made
    assert record_slot_result(any_store, "j", failed=True) == 1
    assert record_slot_result(any_store, "j", failed=True) == 2
    assert record_slot_result(any_store, "j", failed=False) == 0
    other = Store.open(where, migrate=False)
    results: list[int] = []
    worker = threading.Thread(target=lambda: results.append(record_slot_result(any_store, "j", failed=False)))
    try:
        with other.transaction():  # holds the write lock (PostgreSQL: the store-wide lock)
            worker.start()
            worker.join(timeout=5)
            waited = worker.is_alive()
        worker.join()  # the lock is free again: it ends either way
    finally:
        other.close()
    assert not waited and results == [0], "a success at streak 0 waited for the write lock"
    assert record_slot_result(any_store, "j", failed=True) == 1
