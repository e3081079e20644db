"""The kanban dispatcher's side of ``executor: celery``: a ``Launcher`` (``runner.dist.remote``'s
``Broker``) whose attempts run on ``runner worker``s (``runner.dist.kanban_worker``), chosen by the
composition root (serve's ``celery_kanban_loop``, ``runner kanban dispatch``).

``spawn(claim)`` sends ``runner.kanban_attempt(task_id, fence, jobs_hash, job, attempt,
lease_seconds)`` to the queue of the task's job (``queue:``, else the default queue) and returns a
``Remote`` handle (``pid`` 0: no process of this machine; a signal to it does nothing). The
watcher follows the claims in the shared store: a task that left ``running`` under the claim's
fence is the attempt's "exit" (0 when done or blocked, else 1), which the dispatcher's reap sees at
once. While no worker has taken an attempt (its message waits for a free worker) the dispatcher
keeps the claim's lease; one no worker took ``executor.resend_s`` after it was sent is sent again
(a duplicate is refused by the worker's take). Once a worker took it, its lease is the worker's:
a worker lost mid-attempt stops renewing, and the lease expires as with a local worker.

``kanban.max_workers`` counts the attempts claimed by a dispatcher of this host, wherever they run
(``Capacity``): not processes of this machine.
"""

from __future__ import annotations

from runner.dist.app import celery_app
from runner.serve.loops import KanbanTicker
import logging
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from runner.clock import utcnow
from runner.dist.app import DEFAULT_QUEUE, KANBAN_TASK
from runner.dist.jobshash import JobsCache
from runner.dist.remote import Broker, LostRunsTicker, Remote, Sent
from runner.store.board import Board
from runner.store.tasks import AttemptState, Claim
from runner.settings import Settings
from runner.statuses import TaskStatus

if TYPE_CHECKING:
    from runner.serve.host import ServeHost, Ticker

ENDED_OK = (TaskStatus.DONE, TaskStatus.BLOCKED)
Key = tuple[int, int]  # (task id, fence)


class CeleryTaskLauncher(Broker[Key]):
    """``Launcher`` and ``Capacity`` of a dispatcher whose attempts run on ``runner worker``s."""

    def __init__(self, *, app: Any, settings: Settings, log: logging.Logger, recover: bool = False):
        """``recover``: the watcher also ticks the lost-worker recovery (``runner kanban dispatch``
        has no serve doing it: the run of an attempt whose worker was lost ends ``unknown`` too)."""
        cfg = settings.config
        self.settings, self.lease_seconds = settings, cfg.kanban.lease_seconds
        self._jobs = JobsCache(settings.jobs_path, cfg.timezone, settings.own_tool_names)
        every = cfg.executor.heartbeat_s
        self.lost_runs = LostRunsTicker(self, settings.store, log, every=every) if recover else None
        ex = cfg.executor
        super().__init__(app, log, resend_s=ex.resend_s, lost_after_s=ex.lost_after_s, name="runner-kanban-watch")

    def spawn(self, claim: Claim) -> Remote[Key]:
        """Send the attempt; ``RunnerError`` (a broken jobs.yaml here) fails it like a failed start."""
        loaded = self._jobs.current()
        task = Board(self.settings.store).get(claim.task_id)
        name = task.job or self.settings.config.kanban.default_job or ""
        job = loaded.jobs.jobs.get(name)
        queue = job.spec.queue if job is not None else DEFAULT_QUEUE
        c = claim
        args = [c.task_id, c.fence, loaded.hash, name, c.attempt, self.lease_seconds]
        now = time.monotonic()
        label = f"kanban task {c.task_id} (attempt {c.attempt})"
        return self._post(Sent((c.task_id, c.fence), label, KANBAN_TASK, args, queue, now, renewed_at=now))

    def running(self, board: Board) -> int:
        """Attempts claimed by a dispatcher of this host (serve's or ``kanban dispatch``), wherever they run."""
        return board.running_claimed_by(f"{board.host}:%")

    def _watch(self) -> None:
        self._board = Board(self.settings.store)  # this thread's own connection (and writers' gate)
        try:
            super()._watch()
        finally:
            self._board.close()

    def _follow(self, pending: list[Sent[Key]]) -> None:
        if pending:
            states = self._board.attempt_states([s.key[0] for s in pending])
            now, wall = time.monotonic(), utcnow()
            for sent in pending:
                state = states.get(sent.key[0])
                if state is None or not state.running_under(sent.key[1]):
                    self._ended(sent.key, 0 if state is not None and state.status in ENDED_OK else 1)
                elif not state.taken:
                    self._keep(sent, state, now, wall)
        if self.lost_runs is not None:
            self.lost_runs.tick(utcnow())

    def _keep(self, sent: Sent[Key], state: AttemptState, now: float, wall: datetime) -> None:
        """An attempt no worker took yet: keep its lease; send it again after ``resend_s``."""
        if now - sent.renewed_at >= self.lease_seconds / 3:
            self._board.renew(state.task_id, state.fence, now=wall, lease_seconds=self.lease_seconds)
            sent.renewed_at = now
        self._resend_due(sent, now)


def celery_task_launcher(settings: Settings, log: logging.Logger, *, recover: bool = False) -> CeleryTaskLauncher:
    """The launcher with its Celery app; ``recover``: it also runs the lost-worker recovery (a
    dispatcher without serve: ``runner kanban dispatch``)."""

    app = celery_app(settings.config.executor.broker_url())
    return CeleryTaskLauncher(app=app, settings=settings, log=log, recover=recover)


def celery_kanban_loop(host: ServeHost) -> Ticker:
    """serve's kanban loop under ``executor: celery`` (the composition root puts it in place of
    ``runner.serve.loops.kanban_loop``)."""

    launcher = celery_task_launcher(host.settings, host.log)
    host.log.info("kanban: attempts go to runner worker processes through the broker")
    return KanbanTicker(host, launcher=launcher, capacity=launcher, on_close=launcher.close)
