"""Leading the schedule, and where runs execute.

``LeaseTicker`` keeps serve's scheduler lease (``runner.store.lease``): renewed every third of
``serve.lease_s``; when a renewal finds another holder (this serve was paused or cut off longer
than the lease), serve stops at once, before any other ticker fires a slot. ``executor_spawner``
builds the Celery executor's spawner when config.yaml says ``executor: {type: celery}`` (None:
the local pool's own workers).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from runner.store import Store
from runner.store.lease import Lease

if TYPE_CHECKING:
    from runner.config.jobs import Job
    from runner.dist.remote import CelerySpawner
    from runner.serve.pool import Pool
    from runner.settings import Settings


class LeaseTicker:
    name = "lease"

    def __init__(self, lease: Lease, ttl: float, log: logging.Logger, on_lost: Callable[[], None]):
        self.lease, self.every, self.log, self.on_lost = lease, ttl / 3, log, on_lost
        self._next: datetime | None = None

    def tick(self, now: datetime) -> None:
        if self._next is not None and now < self._next:
            return
        if not self.lease.renew():  # the wall clock: leases are compared across machines
            self.log.error("another serve holds the scheduler lease now; this one stops scheduling")
            self.on_lost()
            return
        self._next = now + timedelta(seconds=self.every)

    def next_wake(self, now: datetime) -> datetime | None:
        return self._next

    def close(self) -> None:
        return None


def executor_spawner(settings: Settings, store: Store, log: logging.Logger) -> CelerySpawner | None:
    executor = settings.config.executor
    if executor.type != "celery":
        return None
    from runner.dist.app import celery_app
    from runner.dist.remote import CelerySpawner

    app = celery_app(executor.broker_url())
    log.info("executor: celery (broker %s); runs go to runner worker processes", _safe(executor.broker_url()))
    spawner = CelerySpawner(app=app, store=store, resend_s=executor.resend_s, log=log)
    spawner.connect()
    return spawner


def follow_remote(pool: Pool, spawner: CelerySpawner, store: Store, jobs: dict[str, Job]) -> int:
    """The pool follows the scheduled runs ``runner worker``s are running now (a previous leader sent
    them); return how many."""
    from runner.clock import parse_iso, utcnow
    from runner.serve.fire import Fire
    from runner.serve.pool import RETRIED
    from runner.statuses import RunStatus, Trigger

    rows = store.query(
        "SELECT * FROM runs WHERE status=? AND worker IS NOT NULL AND trigger IN (?, ?, ?)", (RunStatus.RUNNING, *RETRIED)
    )
    count = 0
    for row in rows:
        job = jobs.get(row["job"])
        if job is None:
            continue  # it ends by itself; nothing to retry for a removed job
        slot = parse_iso(row["slot"])
        fire = Fire(row["id"], job, slot, Trigger(row["trigger"]), int(row["attempt"] or 1), row["parent_run"], row["task_id"])
        handle = spawner.adopt(row["id"], job.name, job.spec.queue)
        pool.follow(fire, handle, parse_iso(row["started_at"]) or utcnow())
        count += 1
    return count


def _safe(url: str) -> str:
    """The broker URL without its password."""
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        rest = "***@" + rest.split("@", 1)[1]
    return f"{scheme}{sep}{rest}"
