"""The loops `runner serve` runs beside the scheduler: the kanban dispatcher, the one-time
cleanup of stale runner containers, the idle Curator, retention, and the log line of each run
that starts waiting on an approval.

Each factory takes the ``ServeHost`` and returns a ticker (``tick(now)``, ``next_wake(now)``,
``close()``); ``LOOPS`` lists them and ``runner.cli.serve`` passes them to the daemon.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from runner.backends.docker import cleanup_stale
from runner.errors import BackendError
from runner.run.model_choice import side_model
from runner.serve.host import COMMIT_CHECK_S, ServeHost, Ticker, TickerFactory
from runner.skills.curator import run_pass
from runner.skills.idle import CuratorTicker
from runner.store import Store, ledger, queries
from runner.store.retention import Policy, Pruner, old_logs

if TYPE_CHECKING:
    from runner.kanban.dispatch import Capacity
    from runner.run.forks import Launcher
    from runner.store.tasks import Claim


class KanbanTicker:
    """The kanban dispatcher inside serve: promote, reclaim, claim and start workers. It looks
    every ``CHECK`` whether another process committed to runner.db (``PRAGMA data_version``, as
    ``runner kanban dispatch`` does) and ticks then, or every ``kanban.poll_seconds``, or when a
    worker exited; workers fork from serve's warm forkserver."""

    name = "kanban"
    CHECK = timedelta(seconds=COMMIT_CHECK_S)

    def __init__(
        self,
        host: ServeHost,
        *,
        launcher: Launcher[Claim] | None = None,
        capacity: Capacity | None = None,
        on_close: Callable[[], None] | None = None,
    ):
        """``launcher``/``capacity``: where attempts run and what counts against ``max_workers``
        (default: forked from serve's forkserver, counted per host); ``on_close``: called last."""
        from runner.kanban.dispatch import Dispatcher, HostCapacity, TaskForkLauncher

        self.host, self.on_close = host, on_close
        if launcher is None and host.forks is not None:
            launcher = TaskForkLauncher(host.settings, host.forks)
        self.dispatcher = Dispatcher(
            host.settings, launcher=launcher, capacity=capacity or HostCapacity(), clock=host.clock.now
        )
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
        if self.on_close is not None:
            self.on_close()


class ContainerCleanup:
    """At start, remove runner-labelled containers whose run is no longer going (in a thread: a
    missing Docker daemon can take seconds to answer, and serve must not wait for it)."""

    name = "container-cleanup"

    def __init__(self, host: ServeHost):
        self.host = host
        self._started = False

    def _uses_docker(self) -> bool:
        return any(job.spec.backend.type == "docker" for job in self.host.jobs().values())

    def tick(self, now: datetime) -> None:
        if self._started:
            return
        self._started = True
        if self._uses_docker():
            threading.Thread(target=self._run, name="runner-container-cleanup", daemon=True).start()

    def _run(self) -> None:
        store = Store.open(self.host.store.path, migrate=False)
        try:
            def is_active(run_id: str) -> bool:
                return ledger.is_active(store, run_id)

            try:
                removed = cleanup_stale(is_active, home=self.host.settings.home)
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


class RetentionLoop:
    """config.yaml's ``retention:`` applied every ``retention.every`` (daily), first at start: a
    thread with its own connection prunes in batches of at most ``retention.batch`` runs, one
    short transaction each (sized to ~25 ms by the ``Pruner``) with a pause between them, so serve's own writes (a fire's ledger row) wait at
    most one batch and fires stay on time. Does nothing when no ``runs_older_than`` /
    ``logs_older_than`` is configured."""

    name = "retention"

    def __init__(self, host: ServeHost):
        self.host = host
        self.conf = host.settings.config.retention
        self._next: datetime | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    @property
    def enabled(self) -> bool:
        return self.conf.runs_older_than is not None or self.conf.logs_older_than is not None

    def tick(self, now: datetime) -> None:
        if not self.enabled or (self._next is not None and now < self._next):
            return
        if self._thread is not None and self._thread.is_alive():
            return
        self._next = now + timedelta(seconds=self.conf.every)
        self._thread = threading.Thread(target=self._run, args=(now,), name="runner-retention", daemon=True)
        self._thread.start()

    def _run(self, now: datetime) -> None:
        store = Store.open(self.host.store.path, migrate=False)
        try:
            home, conf = self.host.settings.home, self.conf
            logs = old_logs(home, store, conf.logs_older_than, now) if conf.logs_older_than is not None else []
            for path in logs:
                path.unlink(missing_ok=True)
            if conf.runs_older_than is None:
                return
            policy = Policy(conf.runs_older_than, conf.keep_last, conf.outputs, conf.transcripts)
            pruner = Pruner(store, home, policy, now, batch=conf.batch)
            # each step: runs deleted with the space they free, or free pages left over given back
            while not self._stop.is_set() and pruner.step():
                self._stop.wait(pruner.pause)
            result = pruner.result()
            if result.runs:
                self._forget_checkpoints(store)
            if result.runs or logs:
                self.host.log.info(
                    "retention: removed %d runs (%d events), %d files, %d kanban logs; longest write lock %.0f ms",
                    result.runs,
                    result.events,
                    result.files,
                    len(logs),
                    result.longest_hold_ms,
                )
        except sqlite3.Error as exc:
            self.host.log.warning("retention pass failed (tried again next time): %s", exc)
        finally:
            store.close()

    def _forget_checkpoints(self, store: Store) -> None:
        """The workdir checkpoints of the runs just removed (runner.run.shadow.prune)."""
        from runner.errors import CheckpointError
        from runner.run.shadow import prune

        try:
            forgotten = prune(self.host.settings.home, lambda ids: set(ledger.rows_of(store, ids)))
        except CheckpointError as exc:
            self.host.log.warning("retention: checkpoints not pruned (tried again next time): %s", exc)
            return
        if forgotten:
            self.host.log.info("retention: forgot the checkpoints of %d runs", forgotten)

    def next_wake(self, now: datetime) -> datetime | None:
        return self._next if self.enabled else None

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)


class WaitingLog:
    """One log line when a run starts ``waiting`` on an approval (whoever runs it: serve's worker,
    ``run-job``, a kanban or Celery worker), with the command and how to answer. Looks every
    ``EVERY`` seconds (one indexed read); each request is logged once."""

    name = "waiting-log"
    EVERY = 1.0

    def __init__(self, host: ServeHost):
        self.host = host
        self._seen: set[str] = set()
        self._next: datetime | None = None

    def tick(self, now: datetime) -> None:
        if self._next is not None and now < self._next:
            return
        self._next = now + timedelta(seconds=self.EVERY)
        waiting = queries.waiting_runs(self.host.store)
        for w in waiting:
            if w.approval_id in self._seen:
                continue
            self.host.log.warning(
                "run %s of %s is waiting for approval %s until %s: %s; answer with: runner approvals grant %s "
                "(or deny %s)",
                w.run_id,
                w.job,
                w.approval_id,
                w.expires_at,
                w.command[:200],
                w.approval_id,
                w.approval_id,
            )
        self._seen = {w.approval_id for w in waiting}  # only the requests still pending are remembered

    def next_wake(self, now: datetime) -> datetime | None:
        return self._next

    def close(self) -> None:
        return None


def waiting_log(host: ServeHost) -> Ticker:
    return WaitingLog(host)


def retention_loop(host: ServeHost) -> Ticker:
    return RetentionLoop(host)


def curator_loop(host: ServeHost) -> Ticker:
    return CuratorLoop(host)


def kanban_loop(host: ServeHost) -> Ticker:
    return KanbanTicker(host)


def container_cleanup(host: ServeHost) -> Ticker:
    return ContainerCleanup(host)


LOOPS: tuple[TickerFactory, ...] = (kanban_loop, container_cleanup, curator_loop, retention_loop, waiting_log)
