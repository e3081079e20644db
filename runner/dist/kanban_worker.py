"""``runner worker``'s side of the kanban dispatcher under ``executor: celery``: the body of the
``runner.kanban_attempt(task_id, fence, jobs_hash, job, attempt, lease_seconds)`` task.

A dispatcher (serve's, or ``runner kanban dispatch``) claimed the task in the shared store and sent
the claim. The worker *takes* the attempt (``Board.take``: only while the task is running under
that fence and no worker took it yet), so a message delivered twice, or late after a reclaim, is
refused there and never runs the task twice. The job and the attempt number come from the task
row (its ``job``, else this worker's ``kanban.default_job``; its ``attempts``): a message naming
others fails the attempt with reason ``message_mismatch`` before anything runs. It checks the jobs
hash against its own checkout (a mismatch fails the attempt with reason ``jobs_mismatch``; the
task's retry policy applies), writes the attempt's run row (of the task's job) held by this worker (its heartbeat covers it: serve's lost-worker recovery
ends it ``unknown`` if this machine goes away) and forks ``runner kanban work``'s body
(``runner.kanban.work.forked_main``) from the worker's warm forkserver, as a local dispatcher does.
That child attaches (the task's host is this worker's name, so no dispatcher signals it), renews
the lease at a third of the dispatcher's lease and ends the task; a child gone without ending it
fails the attempt here, as the local dispatcher's reap does.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from enum import StrEnum

from runner.clock import utcnow
from runner.dist.worker import Refusal, WorkerRuntime
from runner.errors import RunnerError
from runner.run.forks import LOST_EXIT, ForkError
from runner.store.board import Board
from runner.kanban.dispatch import TaskForkLauncher
from runner.store.tasks import Claim, FenceError
from runner.kanban.work import Assignment
from runner.host.procs import start_time
from runner.statuses import RunStatus, Trigger
from runner.store import ledger

log = logging.getLogger("runner.worker")
WAIT_S = 0.05  # how often the task looks at the attempt's process


class AttemptStatus(StrEnum):
    """What a delivery of ``runner.kanban_attempt`` did."""

    ENDED = "ended"  # the attempt ran; the board says how it ended
    REFUSED = "refused"  # the fence is no longer current, or another delivery took the attempt
    JOBS_MISMATCH = "jobs_mismatch"  # this worker's jobs.yaml differs from the dispatcher's
    MESSAGE_MISMATCH = "message_mismatch"  # the message names another job or attempt than the task row


@dataclass(frozen=True)
class Attempt:
    """One message: the claim the dispatcher made and what it expects the worker to run (``job``
    and ``attempt`` are checked against the task row, never taken from here)."""

    task_id: int
    fence: int
    jobs_hash: str
    job: str
    attempt: int
    lease_seconds: float  # the dispatcher's: the attempt renews its lease at a third of it


class KanbanAttempts:
    """Runs the attempts a ``runner worker`` receives (one per Celery thread at a time)."""

    def __init__(self, runtime: WorkerRuntime):
        self.runtime = runtime

    def run(self, attempt: Attempt) -> AttemptStatus:
        board = Board(self.runtime.store, host=self.runtime.name)  # the task records this worker as its host
        try:
            pid = os.getpid()
            try:  # tried again while the store cannot answer (the message goes back past that)
                self.runtime.retrying(
                    lambda: self._take(board, attempt, pid), f"kanban task {attempt.task_id}: the take"
                )
            except FenceError as exc:
                log.info("kanban task %s: this delivery is refused: %s", attempt.task_id, exc)
                return AttemptStatus.REFUSED
            return self._taken(board, attempt)
        finally:
            board.close()

    @staticmethod
    def _take(board: Board, attempt: Attempt, pid: int) -> None:
        board.take(attempt.task_id, attempt.fence, pid=pid, pid_start=start_time(pid), now=utcnow())

    def _taken(self, board: Board, attempt: Attempt) -> AttemptStatus:
        """The attempt is this worker's: its run row, then the hash check and the attempt itself. A
        fault of this process (the store, the forkserver) still ends the run row, never left queued."""
        rt = self.runtime
        task = board.get(attempt.task_id)
        job = task.job or rt.settings.config.kanban.default_job or ""
        run_id = ledger.open_run(
            rt.store,
            job=job,
            trigger=Trigger.KANBAN,
            status=RunStatus.QUEUED,
            task_id=str(attempt.task_id),
            worker=rt.name,
        )
        with rt.holding(run_id):  # the worker's heartbeat covers the attempt's run row
            try:
                if attempt.job != job or attempt.attempt != task.attempts:
                    error = attempt_mismatch(attempt, job, task.attempts)
                    self._fail(board, attempt, run_id, error, reason=Refusal.MESSAGE_MISMATCH)
                    return AttemptStatus.MESSAGE_MISMATCH
                return self._checked(board, attempt, run_id)
            except Exception:
                rt.settle(run_id, LOST_EXIT)
                raise

    def _checked(self, board: Board, attempt: Attempt, run_id: str) -> AttemptStatus:
        rt = self.runtime
        try:
            loaded = rt.jobs.current()
        except (RunnerError, OSError) as exc:  # a broken jobs.yaml here: the attempt fails, saying why
            self._fail(board, attempt, run_id, f"jobs_mismatch: this worker cannot load its jobs.yaml: {exc}")
            return AttemptStatus.JOBS_MISMATCH
        if loaded.hash != attempt.jobs_hash:
            self._fail(
                board,
                attempt,
                run_id,
                f"jobs_mismatch: this worker's jobs.yaml ({rt.settings.jobs_path}, hash {loaded.hash}) differs from "
                f"the dispatcher's (hash {attempt.jobs_hash}); deploy the same project folder to every worker",
            )
            return AttemptStatus.JOBS_MISMATCH
        try:
            code = self._fork(attempt, run_id)
        except ForkError as exc:
            log.error("kanban task %s: cannot fork the attempt: %s", attempt.task_id, exc)
            code = LOST_EXIT
        rt.settle(run_id, code)  # a run row the child left unfinished ends failed (worker_died)
        backoff = rt.settings.config.kanban.retry_backoff
        status = board.worker_exited(attempt.task_id, attempt.fence, code, now=utcnow(), backoff=backoff)
        ended = f"; task now {status}" if status else ""
        log.info("kanban task %s (fence %s): attempt ended (exit %s)%s", attempt.task_id, attempt.fence, code, ended)
        return AttemptStatus.ENDED

    def _fail(
        self, board: Board, attempt: Attempt, run_id: str, error: str, *, reason: Refusal = Refusal.JOBS_MISMATCH
    ) -> None:
        """The attempt fails before it ran (``reason``); the task's retry policy applies. The task
        first, then the run row: whoever sees the run ended sees the task's attempt ended too."""
        log.error("kanban task %s: %s", attempt.task_id, error)
        backoff = self.runtime.settings.config.kanban.retry_backoff
        try:
            board.fail_attempt(attempt.task_id, attempt.fence, error, now=utcnow(), backoff=backoff)
        except FenceError as exc:
            log.info("kanban task %s: %s", attempt.task_id, exc)  # reclaimed meanwhile: nothing to fail
        ledger.finish(self.runtime.store, run_id, RunStatus.FAILED, reason=reason, error=error)

    def _fork(self, attempt: Attempt, run_id: str) -> int:
        """Fork ``runner kanban work``'s body for the attempt and wait for its exit code."""
        rt = self.runtime
        claim = Claim(attempt.task_id, attempt.fence, rt.name, "", attempt.attempt)
        assignment = Assignment(run_id, rt.name, attempt.lease_seconds)
        handle = TaskForkLauncher(rt.settings, rt.launcher.forks, assignment).spawn(claim)
        while (code := handle.poll()) is None:
            time.sleep(WAIT_S)
        handle.close()
        return code


def attempt_mismatch(attempt: Attempt, job: str, attempts: int) -> str:
    return (
        f"message_mismatch: the message names job {attempt.job!r}, attempt {attempt.attempt}, but task "
        f"{attempt.task_id} is at attempt {attempts} of job {job!r}: nothing ran (only a dispatcher sends "
        "attempts; check who can write to the broker)"
    )
