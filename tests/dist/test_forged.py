"""Forged Celery messages (issue 29): whoever can write to the broker sends ``runner.execute`` or
``runner.kanban_attempt`` naming a real queued row of job ``harmless`` but job ``deploy``. With a
real redis-server and a real ``runner worker``: nothing of ``deploy`` runs (the marker its pre_run
would write never appears), nothing of ``harmless`` runs either, and the row ends ``failed`` with
reason ``message_mismatch`` naming both jobs. A message that matches its row still runs it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from runner.clock import utcnow
from runner.config.jobs import load_jobs
from runner.dist.app import KANBAN_TASK, TASK, celery_app
from runner.dist.jobshash import jobs_hash
from runner.statuses import RunStatus, Trigger
from tests.dist.conftest import Cluster, Machine, wait_ready_all
from tests.servehelp import wait_for

JOBS = """
jobs:
  harmless:
    agent: false
    pre_run: touch {marks}/harmless-ran
  deploy:
    agent: false
    pre_run: touch {marks}/DEPLOYED
"""


def _store(cluster: Cluster) -> Any:
    from runner.store import Store
    from runner.store.dialect import PgURL

    if cluster.store_url.startswith("postgresql"):
        return Store.open(PgURL(cluster.store_url))
    return Store.open(Path(cluster.store_url.removeprefix("sqlite://")))


def _setup(cluster: Cluster) -> tuple[Path, Machine, str]:
    """The marker folder, a ready worker and its jobs hash (what a forger can compute too)."""
    marks = cluster.tmp / "marks"
    marks.mkdir()
    cluster.write_jobs(JOBS.format(marks=marks))
    worker = cluster.worker("w0", concurrency=1)
    wait_ready_all(cluster, [worker])
    return marks, worker, jobs_hash(load_jobs(worker.jobs_path))


def _send(cluster: Cluster, name: str, args: list[Any]) -> None:
    app = celery_app(cluster.broker)
    try:
        app.send_task(name, args=args, queue="runner")
    finally:
        app.close()


def _ended(cluster: Cluster, run_id: str) -> dict[str, Any]:
    def row() -> dict[str, Any] | None:
        rows = cluster.rows("SELECT * FROM runs WHERE id=?", (run_id,))
        return rows[0] if rows and rows[0]["status"] not in ("queued", "running") else None

    return wait_for(row, timeout=30, what=f"run {run_id} to end")


def test_a_forged_execute_naming_another_job_runs_nothing(cluster: Cluster) -> None:
    marks, _, good_hash = _setup(cluster)
    store = _store(cluster)
    try:
        from runner.store import ledger

        forged = ledger.open_run(store, job="harmless", trigger=Trigger.SCHEDULE, status=RunStatus.QUEUED, slot=utcnow())
        honest = ledger.open_run(store, job="harmless", trigger=Trigger.MANUAL, status=RunStatus.QUEUED)
    finally:
        store.close()
    _send(cluster, TASK, [forged, good_hash, "deploy"])
    row = _ended(cluster, forged)
    time.sleep(1.0)  # whatever the worker would have started has had time to write its marker
    assert not (marks / "DEPLOYED").exists() and not (marks / "harmless-ran").exists()
    assert (row["job"], row["status"], row["reason"]) == ("harmless", "failed", "message_mismatch")
    assert "names job 'deploy'" in row["error"] and "a run of job 'harmless'" in row["error"]
    assert "nothing ran" in row["error"]
    assert row["worker"] and row["worker"].startswith("w0@test")
    assert not cluster.rows("SELECT id FROM runs WHERE job='deploy'")  # no run of deploy at all

    _send(cluster, TASK, [honest, good_hash, "harmless"])  # the message a scheduler sends
    row = _ended(cluster, honest)
    assert (row["job"], row["status"]) == ("harmless", "succeeded"), row
    assert (marks / "harmless-ran").exists() and not (marks / "DEPLOYED").exists()


def test_a_forged_kanban_attempt_naming_another_job_or_attempt_runs_nothing(cluster: Cluster) -> None:
    from runner.store.board import Board

    marks, worker, good_hash = _setup(cluster)
    out = worker.cli("kanban", "add", "tidy up", "--job", "harmless")
    assert out.returncode == 0, out.stderr
    store = _store(cluster)
    board = Board(store, host="forger")
    try:
        [claim] = board.claim("forger", now=utcnow(), lease_seconds=60)  # a dispatcher's claim, in the store
        _send(cluster, KANBAN_TASK, [claim.task_id, claim.fence, good_hash, "deploy", claim.attempt, 60])
        run = wait_for(
            lambda: [r for r in cluster.rows("SELECT * FROM runs WHERE trigger='kanban'") if r["status"] == "failed"],
            timeout=30,
            what="the attempt's run to fail",
        )[0]
    finally:
        board.close()
        store.close()
    assert (run["job"], run["reason"]) == ("harmless", "message_mismatch")
    assert "names job 'deploy', attempt 1" in run["error"] and "of job 'harmless'" in run["error"]
    task = cluster.rows("SELECT * FROM tasks WHERE id=?", (claim.task_id,))[0]
    assert task["status"] != "done" and "message_mismatch" in (task["error"] or "")
    time.sleep(1.0)
    assert not (marks / "DEPLOYED").exists() and not (marks / "harmless-ran").exists()
