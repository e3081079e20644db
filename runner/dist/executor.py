"""``executor: celery`` for serve (the ``RemoteExecutor`` seam of ``runner.serve.host``): the
pool's spawner sends runs to the broker, the runs ``runner worker``s hold are followed after a
takeover, and the lost-worker recovery ticks beside the schedule. The composition root
(``runner.cli.serve``) passes ``celery_executor`` to serve only when config.yaml asks for it.
"""

from __future__ import annotations

from runner.dist.app import celery_app
from runner.clock import parse_iso, utcnow
from runner.serve.fire import Fire
from runner.serve.pool import RETRIED
from runner.statuses import RunStatus, Trigger
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from runner.dist.recovery import LostRunsTicker
from runner.store import ledger
from runner.dist.remote import CelerySpawner
from runner.settings import Settings
from runner.store import Store

if TYPE_CHECKING:
    from runner.config.jobs import Job
    from runner.serve.host import Ticker
    from runner.serve.pool import Pool


class CeleryExecutor:
    def __init__(self, settings: Settings, store: Store, log: logging.Logger):
        executor = settings.config.executor
        self.store, self.log = store, log
        self.heartbeat_s, self.lost_after_s = executor.heartbeat_s, executor.lost_after_s
        url = executor.broker_url()
        log.info("executor: celery (broker %s); runs go to runner worker processes", _safe(url))
        self._spawner = CelerySpawner(app=celery_app(url), store=store, resend_s=executor.resend_s, log=log)
        self._spawner.connect()

    @property
    def spawner(self) -> CelerySpawner:
        return self._spawner

    def follow(self, pool: Pool, jobs: Mapping[str, Job]) -> int:
        """The pool follows the runs ``runner worker``s are running now (a previous leader sent them)."""

        count = 0
        for row in ledger.running_on_workers(self.store, RETRIED):
            job = jobs.get(row.job)
            if job is None:
                continue  # it ends by itself; nothing to retry for a removed job
            fire = Fire(row.id, job, parse_iso(row.slot), row.trigger, int(row.attempt or 1), row.parent_run, row.task_id)
            pool.follow(fire, self._spawner.adopt(row.id, job.name, job.spec.queue), parse_iso(row.started_at) or utcnow())
            count += 1
        return count

    def tickers(self) -> list[Ticker]:
        return [LostRunsTicker(self.store, self.log, every=self.heartbeat_s, lost_after_s=self.lost_after_s)]

    def close(self) -> None:
        self._spawner.close()


def celery_executor(settings: Settings, store: Store, log: logging.Logger) -> CeleryExecutor:
    return CeleryExecutor(settings, store, log)


def _safe(url: str) -> str:
    """The broker URL without its password."""
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        rest = "***@" + rest.split("@", 1)[1]
    return f"{scheme}{sep}{rest}"
