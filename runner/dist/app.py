"""The Celery application runner uses (serve sends with it, ``runner worker`` consumes with it).

Two tasks: ``runner.execute(run_id, jobs_hash, job)``: the run's ledger row is already written
(``queued``); the task only names it. ``runner.kanban_attempt(task_id, fence, jobs_hash, job,
attempt, lease_seconds)``: a kanban dispatcher's claim (``runner.dist.kanban_remote``); the worker takes it only
while the fence is current and no other delivery took it (``runner.dist.kanban_worker``).
``acks_late`` with ``reject_on_worker_lost``: a message is acknowledged once its run ended, so a
worker lost mid-run leaves it to be delivered again, and the ledger's claim (``runs.worker`` set
once; for an attempt, the task's fence and ``worker_pid``) makes that second delivery a no-op. Celery is imported
here only, and only by a process that uses the Celery executor.
"""

from __future__ import annotations

from typing import Any

TASK = "runner.execute"
KANBAN_TASK = "runner.kanban_attempt"
DEFAULT_QUEUE = "runner"


def celery_app(broker: str) -> Any:
    from celery import Celery

    app = Celery("runner", broker=broker, set_as_current=False)
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_ignore_result=True,
        task_default_queue=DEFAULT_QUEUE,
        task_serializer="json",
        accept_content=["json"],
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
        broker_transport_options={"visibility_timeout": 3600},
        task_publish_retry=True,
        task_publish_retry_policy={"max_retries": 2, "interval_start": 0.1, "interval_step": 0.5},
    )
    return app


def requeue(why: str) -> Exception:
    """What a task raises to give its message back to the broker (nothing of it was taken: a
    claim the store could not answer), so another delivery tries again."""
    from celery.exceptions import Reject

    return Reject(why, requeue=True)
