"""The kanban dispatcher's side of ``executor: celery``: a ``TaskLauncher`` whose attempts run on
``runner worker``s (``runner.dist.kanban_worker``), chosen by the composition root (serve's
``celery_kanban_loop``, ``runner kanban dispatch``).

``start(claim)`` sends ``runner.kanban_attempt(task_id, fence, jobs_hash, job, attempt,
lease_seconds)`` to the
queue of the task's job (``queue:``, else the default queue) and returns a ``RemoteAttempt``
(``pid`` 0: no process of this machine; nothing ever signals it). A watcher thread follows the
claims in the shared store every ``POLL_S``: a task that left ``running`` under the claim's fence
is the attempt's "exit" (0 when done or blocked, else 1), which the dispatcher's reap sees at
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
from runner.dist.recovery import LostRunsTicker
import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from runner.clock import utcnow
from runner.dist.app import DEFAULT_QUEUE, KANBAN_TASK
from runner.dist.jobshash import JobsCache
from runner.kanban.board import Board
from runner.kanban.model import AttemptState, Claim
from runner.settings import Settings
from runner.statuses import TaskStatus

if TYPE_CHECKING:
    from runner.serve.host import ServeHost, Ticker

POLL_S = 0.1
ENDED_OK = (TaskStatus.DONE, TaskStatus.BLOCKED)


@dataclass
class _Sent:
    claim: Claim
    job: str
    queue: str
    jobs_hash: str
    sent_at: float  # monotonic: when it was (last) sent
    renewed_at: float  # monotonic: when the dispatcher last renewed the lease of the untaken attempt

    @property
    def key(self) -> tuple[int, int]:
        return (self.claim.task_id, self.claim.fence)


class RemoteAttempt:
    """An attempt sent to the broker, as the dispatcher sees it (``TaskWorker``)."""

    pid = 0  # no process of this machine: never attached, never signalled

    def __init__(self, launcher: CeleryTaskLauncher, task_id: int, fence: int):
        self._launcher, self.task_id, self.fence = launcher, task_id, fence
        self._code: int | None = None

    def poll(self) -> int | None:
        if self._code is None:
            self._code = self._launcher.exit_code(self.task_id, self.fence)
        return self._code


class CeleryTaskLauncher:
    """``TaskLauncher`` and ``Capacity`` of a dispatcher whose attempts run on ``runner worker``s."""

    def __init__(self, *, app: Any, settings: Settings, log: logging.Logger, lost_runs: Ticker | None = None):
        """``lost_runs``: the lost-worker recovery, ticked by the watcher (``runner kanban dispatch``
        has no serve doing it: the run of an attempt whose worker was lost ends ``unknown`` too)."""
        self.app, self.settings, self.log, self.lost_runs = app, settings, log, lost_runs
        cfg = settings.config
        self.resend_s, self.lease_seconds = cfg.executor.resend_s, cfg.kanban.lease_seconds
        self._jobs = JobsCache(settings.jobs_path, cfg.timezone, settings.own_tool_names)
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()  # sends come from the dispatcher's thread and from the watcher
        self._sent: dict[tuple[int, int], _Sent] = {}
        self._exits: dict[tuple[int, int], int] = {}
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="runner-kanban-watch", daemon=True)
        self._thread.start()

    # -- TaskLauncher and Capacity ---------------------------------------------------------------
    def start(self, claim: Claim) -> RemoteAttempt:
        """Send the attempt; ``RunnerError`` (a broken jobs.yaml here) fails it like a failed start."""
        loaded = self._jobs.current()
        task = Board(self.settings.store).get(claim.task_id)
        name = task.job or self.settings.config.kanban.default_job or ""
        job = loaded.jobs.jobs.get(name)
        queue = job.spec.queue if job is not None else DEFAULT_QUEUE
        now = time.monotonic()
        sent = _Sent(claim, name, queue, loaded.hash, now, now)
        with self._lock:
            self._sent[sent.key] = sent
        self._send(sent)
        return RemoteAttempt(self, claim.task_id, claim.fence)

    def running(self, board: Board) -> int:
        """Attempts claimed by a dispatcher of this host (serve's or ``kanban dispatch``), wherever they run."""
        return board.running_claimed_by(f"{board.host}:%")

    def exit_code(self, task_id: int, fence: int) -> int | None:
        """The attempt's "exit" once its task left ``running`` under ``fence`` (then forgotten here)."""
        with self._lock:
            code = self._exits.pop((task_id, fence), None)
            if code is not None:
                self._sent.pop((task_id, fence), None)
        return code

    def close(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)

    # -- internals --------------------------------------------------------------------------------
    def _send(self, sent: _Sent) -> None:
        c = sent.claim
        try:
            with self._send_lock:
                self.app.send_task(
                    KANBAN_TASK,
                    args=[c.task_id, c.fence, sent.jobs_hash, sent.job, c.attempt, self.lease_seconds],
                    queue=sent.queue,
                )
        except Exception as exc:  # noqa: BLE001 - broker faults differ per transport; sent again later
            self.log.error("kanban task %s: cannot send the attempt to the broker: %s; will retry", c.task_id, exc)
            sent.sent_at = time.monotonic() - self.resend_s + 1.0
            return
        sent.sent_at = time.monotonic()

    def _watch(self) -> None:
        board = Board(self.settings.store)  # this thread's own connection (and writers' gate)
        try:
            while not self._stopped.wait(POLL_S):
                with self._lock:
                    pending = [s for s in self._sent.values() if s.key not in self._exits]
                try:
                    if pending:
                        self._check(board, pending)
                    if self.lost_runs is not None:
                        self.lost_runs.tick(utcnow())
                except Exception as exc:  # noqa: BLE001 - a store fault: logged, the next poll tries again
                    self.log.error("kanban: cannot follow the attempts sent to workers: %s", exc)
        finally:
            board.close()

    def _check(self, board: Board, pending: list[_Sent]) -> None:
        states = board.attempt_states([s.claim.task_id for s in pending])
        now, wall = time.monotonic(), utcnow()
        for sent in pending:
            state = states.get(sent.claim.task_id)
            if state is None or not state.running_under(sent.claim.fence):
                with self._lock:
                    self._exits[sent.key] = 0 if state is not None and state.status in ENDED_OK else 1
            elif not state.taken:
                self._keep(board, sent, state, now, wall)

    def _keep(self, board: Board, sent: _Sent, state: AttemptState, now: float, wall: datetime) -> None:
        """An attempt no worker took yet: keep its lease; send it again after ``resend_s``."""
        if now - sent.renewed_at >= self.lease_seconds / 3:
            board.renew(state.task_id, state.fence, now=wall, lease_seconds=self.lease_seconds)
            sent.renewed_at = now
        if now - sent.sent_at >= self.resend_s:
            self.log.warning(
                "kanban task %s: no worker took attempt %s yet; sending it again", state.task_id, sent.claim.attempt
            )
            self._send(sent)


def celery_task_launcher(settings: Settings, log: logging.Logger, *, recover: bool = False) -> CeleryTaskLauncher:
    """The launcher with its Celery app; ``recover``: it also runs the lost-worker recovery (a
    dispatcher without serve: ``runner kanban dispatch``)."""

    lost_runs = None
    if recover:
        ex = settings.config.executor
        lost_runs = LostRunsTicker(settings.store, log, every=ex.heartbeat_s, lost_after_s=ex.lost_after_s)
    app = celery_app(settings.config.executor.broker_url())
    return CeleryTaskLauncher(app=app, settings=settings, log=log, lost_runs=lost_runs)


def celery_kanban_loop(host: ServeHost) -> Ticker:
    """serve's kanban loop under ``executor: celery`` (the composition root puts it in place of
    ``runner.serve.loops.kanban_loop``)."""

    launcher = celery_task_launcher(host.settings, host.log)
    host.log.info("kanban: attempts go to runner worker processes through the broker")
    return KanbanTicker(host, launcher=launcher, capacity=launcher, on_close=launcher.close)
