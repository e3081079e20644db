"""The loops `runner serve` runs beside the scheduler: the kanban dispatcher, the one-time
cleanup of stale runner containers, and the idle Curator.

Each factory takes the ``ServeHost`` and returns a ticker (``tick(now)``, ``next_wake(now)``,
``close()``); ``LOOPS`` lists them and ``runner.cli.serve`` passes them to the daemon.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

from runner.serve.host import ServeHost, Ticker, TickerFactory
from runner.statuses import ACTIVE


class KanbanTicker:
    """The kanban dispatcher inside serve: promote, reclaim, claim and start workers. It looks
    every ``CHECK`` whether another process committed to runner.db (``PRAGMA data_version``, as
    ``runner kanban dispatch`` does) and ticks then, or every ``kanban.poll_seconds``, or when a
    worker exited; workers fork from serve's warm forkserver."""

    name = "kanban"
    CHECK = timedelta(seconds=0.05)

    def __init__(self, host: ServeHost):
        from runner.kanban.dispatch import Dispatcher, ForkLauncher

        self.host = host
        launcher = ForkLauncher(host.settings, host.forks) if host.forks is not None else None
        self.dispatcher = Dispatcher(host.settings, launcher=launcher)
        self.changes = self.dispatcher.changes()

    def tick(self, now: datetime) -> None:
        if not self.changes.due():
            return
        result = self.dispatcher.tick(now)
        if result.started or result.reclaimed or result.failed_to_start:
            self.host.log.info(
                "kanban: started %d, reclaimed %d, failed to start %d, running %d",
                len(result.started),
                len(result.reclaimed),
                len(result.failed_to_start),
                result.running,
            )

    def next_wake(self, now: datetime) -> datetime | None:
        return now + self.CHECK

    def close(self) -> None:
        self.dispatcher.close()


class ContainerCleanup:
    """At start, remove runner-labelled containers whose run is no longer going (in a thread: a
    missing Docker daemon can take seconds to answer, and serve must not wait for it)."""

    name = "container-cleanup"

    def __init__(self, host: ServeHost):
        self.host = host
        self._started = False

    def _uses_docker(self) -> bool:
        try:
            jobs = self.host.settings.jobs.jobs.values()
        except Exception:  # noqa: BLE001 - serve already reported jobs.yaml problems
            return False
        return any(job.spec.backend.type == "docker" for job in jobs)

    def tick(self, now: datetime) -> None:
        if self._started:
            return
        self._started = True
        if self._uses_docker():
            threading.Thread(target=self._run, name="runner-container-cleanup", daemon=True).start()

    def _run(self) -> None:
        from runner.store import Store

        store = Store.open(self.host.store.path, migrate=False)
        try:
            from backends.docker import cleanup_stale
            from runner.errors import BackendError

            def is_active(run_id: str) -> bool:
                row = store.one("SELECT status FROM runs WHERE id=?", (run_id,))
                return bool(row and row["status"] in ACTIVE)

            try:
                removed = cleanup_stale(is_active)
            except BackendError as exc:
                self.host.log.warning("container cleanup skipped: %s", exc)
                return
            if removed:
                self.host.log.info("removed %d stale runner container(s): %s", len(removed), ", ".join(removed))
        finally:
            store.close()

    def next_wake(self, now: datetime) -> datetime | None:
        return None

    def close(self) -> None:
        return None


class CuratorLoop:
    """The idle Curator inside serve: looks once a minute whether a pass is due and everything is idle."""

    name = "curator"
    every = timedelta(seconds=60)

    def __init__(self, host: ServeHost):
        from functools import partial

        from runner.run.model_choice import side_model
        from runner.skills.curator import run_pass
        from runner.skills.idle import CuratorTicker

        self.host = host
        self.ticker = CuratorTicker(  # the consolidation pass's model: built when a pass needs it
            host.settings, run=partial(run_pass, model=lambda: side_model(host.settings.config, purpose="curator"))
        )
        self._next: datetime | None = None

    def tick(self, now: datetime) -> None:
        if self._next is not None and now < self._next:
            return
        self._next = now + self.every
        result = self.ticker.tick(now)
        if result.action in ("seeded", "ran", "failed"):
            self.host.log.info("curator %s: %s", result.action, result.reason)

    def next_wake(self, now: datetime) -> datetime | None:
        return self._next

    def close(self) -> None:
        return None


def curator_loop(host: ServeHost) -> Ticker:
    return CuratorLoop(host)


def kanban_loop(host: ServeHost) -> Ticker:
    return KanbanTicker(host)


def container_cleanup(host: ServeHost) -> Ticker:
    return ContainerCleanup(host)


LOOPS: tuple[TickerFactory, ...] = (kanban_loop, container_cleanup, curator_loop)
