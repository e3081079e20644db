"""``runner worker``'s side of the Celery executor: the body of the ``runner.execute`` task.

A task names a ``queued`` ledger row. The worker claims it (``UPDATE runs SET worker=... WHERE
id=? AND status='queued' AND worker IS NULL``: a message delivered twice, or a row serve already
ended, is a no-op) and runs what the *row* says: its job, trigger, slot and kanban task. The
message's other fields are checks, never instructions: a job name that is not the row's ends the
run ``failed`` with reason ``message_mismatch`` and nothing runs (whoever can write to the broker
cannot run job ``deploy`` under job ``harmless``'s row), and a jobs hash that is not this worker's
checkout ends it with reason ``jobs_mismatch``. Then it runs exactly as serve's local pool does: a process
forked from a warm forkserver running ``runner.serve.launcher.worker_main``. While it runs, one
thread per worker writes the heartbeat of every run it holds and reads stop requests
(``runs.stop_request``: serve's timeout or ``overlap: replace``), which it passes on as signals.

A claim the store cannot answer (a PostgreSQL restart cut the connection, another process holds
SQLite's write lock) is tried again with a doubling backoff for up to ``CLAIM_WAIT_S``; past that
(or while the worker shuts down) the message goes back to the broker (``ClaimDeferred``), so a
message is never dropped with its row left ``queued`` and nobody to run it.
"""

from __future__ import annotations

from runner.dist.app import KANBAN_TASK, TASK, requeue
from runner.dist.app import celery_app
from runner.config.jobs import inputs_of
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, TypeVar

from runner.clock import parse_iso, utcnow
from runner.dist.jobshash import JobsCache
from runner.serve.launcher import ForkLauncher, Handle, WorkerSpec
from runner.settings import Settings
from runner.statuses import RunStatus, Trigger
from runner.store import StoreUnavailable, ledger, transient
from runner.store.control import Vars, trigger_vars_of

log = logging.getLogger("runner.worker")
WAIT_S = 0.05  # how often a task looks at its run's process
SETTLE_WAIT_S = 60.0  # how long a task tries to record its run's end while the store cannot answer
CLAIM_WAIT_S = 30.0  # how long a claim is tried again while the store cannot answer (then the message goes back)
CLAIM_FIRST_WAIT_S = 0.1  # the first wait between claim tries; it doubles up to CLAIM_MOST_WAIT_S
CLAIM_MOST_WAIT_S = 2.0
T = TypeVar("T")


class ClaimDeferred(Exception):
    """A claim the store could not answer within ``CLAIM_WAIT_S`` (or while the worker stops):
    nothing was taken, and the message goes back to the broker (``register``)."""


class Refusal(StrEnum):
    """Why a worker ended a run (or a kanban attempt) it took without running it: ``runs.reason``."""

    JOBS_MISMATCH = "jobs_mismatch"  # this worker's jobs.yaml differs from the sender's
    MESSAGE_MISMATCH = "message_mismatch"  # the message names another job (or attempt) than the row it names


@dataclass(frozen=True)
class Claimed:
    """The queued row a worker took."""

    run_id: str
    job: str
    trigger: Trigger
    slot: datetime | None
    task_id: str | None
    created_at: datetime | None
    vars: Vars = ()  # the template variables of the trigger that opened it (``jobs trigger --var``)


def worker_name(hostname: str) -> str:
    """What ``runs.worker`` holds: the Celery hostname and this process's pid (unique per process)."""
    return f"{hostname}/{os.getpid()}"


class WorkerRuntime:
    """One per ``runner worker`` process: its settings, store, jobs.yaml, forkserver and heartbeat."""

    def __init__(self, settings: Settings, hostname: str):
        self.settings = settings
        self.name = worker_name(hostname)
        config = settings.config
        self.heartbeat_s = config.executor.heartbeat_s
        self.kill_grace = config.serve.kill_grace
        self.store = settings.store
        self.jobs = JobsCache(settings.jobs_path, config.timezone, settings.own_tool_names)
        self.launcher = ForkLauncher(config_path=settings.config_path)
        self._lock = threading.Lock()
        self._stops: dict[str, str] = {}  # run id -> "kill", or "term" / why (timeout ...): as serve asked
        self._held: set[str] = set()
        self._stopped = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, name="runner-worker-heartbeat", daemon=True)

    def start(self) -> WorkerRuntime:
        self.launcher.warm()()
        self._beat.start()
        log.info("runner worker %s ready: jobs from %s, store %s", self.name, self.settings.jobs_path, self.store.path)
        return self

    def close(self) -> None:
        self._stopped.set()
        self.launcher.close()

    # -- the task --------------------------------------------------------------------------------
    def execute(self, run_id: str, jobs_hash: str, job_name: str) -> str:
        """Run the queued row ``run_id``; return its final status (or ``duplicate``). ``jobs_hash``
        and ``job_name`` are what the sender expects: checked against this checkout and the row."""
        claimed = self.retrying(lambda: self._claim(run_id), f"run {run_id}: the claim")
        if claimed is None:
            log.info("run %s: already taken or ended; this delivery is a no-op", run_id)
            return "duplicate"
        with self.holding(run_id):
            if job_name != claimed.job:
                return self._refuse(claimed, Refusal.MESSAGE_MISMATCH, mismatch_error(claimed, job_name))
            return self._run(claimed, jobs_hash)

    @contextmanager
    def holding(self, run_id: str) -> Iterator[None]:
        """``run_id`` is this worker's while the body runs: its heartbeat, serve's stop requests
        and the lost-run fence cover it (a kanban attempt's run row too)."""
        with self._lock:
            self._held.add(run_id)
        try:
            yield
        finally:
            with self._lock:
                self._held.discard(run_id)
                self._stops.pop(run_id, None)

    def _claim(self, run_id: str) -> Claimed | None:
        row = ledger.claim_for_worker(self.store, run_id, self.name)
        if row is None:
            return None
        vars = trigger_vars_of(self.store, row.parent_run or run_id)
        return Claimed(run_id, row.job, row.trigger, parse_iso(row.slot), row.task_id, parse_iso(row.created_at), vars)

    def retrying(self, attempt: Callable[[], T], what: str) -> T:
        """``attempt()``, tried again after a store error worth trying again (``transient``), with
        a doubling backoff, for up to ``CLAIM_WAIT_S``; past that, or once the worker is stopping,
        ``ClaimDeferred`` (nothing was taken: the message goes back to the broker)."""
        deadline = time.monotonic() + CLAIM_WAIT_S
        wait = CLAIM_FIRST_WAIT_S
        tries = 0
        while True:
            tries += 1
            try:
                result = attempt()
            except Exception as exc:
                if not transient(exc):
                    raise
                if time.monotonic() + wait > deadline or self._stopped.is_set():
                    log.error("%s failed %d times, the last: %s; the message goes back to the broker", what, tries, exc)
                    raise ClaimDeferred(f"{what}: the store cannot answer: {exc}") from exc
                log.warning("%s: the store cannot answer (%s); trying again in %.1fs", what, exc, wait)
                time.sleep(wait)
                wait = min(CLAIM_MOST_WAIT_S, wait * 2)
                continue
            if tries > 1:
                log.info("%s went through at try %d", what, tries)
            return result

    def _refuse(self, claimed: Claimed, reason: Refusal, error: str) -> str:
        """End the claimed row ``failed`` with ``reason`` before anything of it ran."""
        log.error("run %s of %s: %s", claimed.run_id, claimed.job, error)
        ledger.finish(self.store, claimed.run_id, RunStatus.FAILED, reason=reason, error=error)
        return RunStatus.FAILED

    def _run(self, claimed: Claimed, jobs_hash: str) -> str:
        loaded = self.jobs.current()
        job = loaded.jobs.jobs.get(claimed.job)
        if loaded.hash != jobs_hash or job is None:
            error = (
                f"this worker's jobs.yaml ({self.settings.jobs_path}, hash {loaded.hash}) differs from the "
                f"scheduler's (hash {jobs_hash}); deploy the same project folder to every worker"
            )
            return self._refuse(claimed, Refusal.JOBS_MISMATCH, error)

        waited = (utcnow() - claimed.created_at).total_seconds() if claimed.created_at else None
        spec = WorkerSpec(
            home=str(self.settings.home),
            jobs_path=str(self.settings.jobs_path),
            config_path=str(self.settings.config_path),
            job=job,
            run_id=claimed.run_id,
            trigger=claimed.trigger,
            slot=claimed.slot,
            task_id=claimed.task_id,
            vars=claimed.vars,
            control_inputs=tuple(str(p) for p in inputs_of(loaded.jobs.jobs)),
            waited_s=round(max(0.0, waited), 3) if waited is not None else None,
        )
        handle = self.launcher.spawn(spec)
        code = self._supervise(claimed.run_id, handle)
        with self._lock:
            why = self._stops.get(claimed.run_id)  # serve asked it to stop (timeout ...): its end says why
        return self.settle(claimed.run_id, code, why=why, timeout_s=job.spec.timeout)

    def _supervise(self, run_id: str, handle: Handle) -> int:
        """Wait for the run's process, passing serve's stop requests on as signals."""
        termed_at: float | None = None
        killed = False
        while (code := handle.poll()) is None:
            with self._lock:
                ask = self._stops.get(run_id)
            now = time.monotonic()
            if ask is not None and ask != "kill" and termed_at is None:  # "term", or why: timeout, shutdown, replaced
                handle.signal_tree(signal.SIGTERM)
                termed_at = now
            elif not killed and (ask == "kill" or (termed_at is not None and now - termed_at >= self.kill_grace)):
                handle.signal_tree(signal.SIGKILL)
                killed = True
            time.sleep(WAIT_S)
        if termed_at is not None or killed:
            handle.signal_tree(signal.SIGKILL)  # what outlived the run's process
        handle.close()
        return code

    def settle(self, run_id: str, code: int, *, why: str | None = None, timeout_s: float | None = None) -> str:
        """``_settle_once``, tried again while the store cannot answer (a PostgreSQL restart) for up
        to ``SETTLE_WAIT_S``; after that the run is left to serve: its heartbeat stops with this
        call, so serve marks it lost (``unknown``) and the retry policy applies."""
        deadline = time.monotonic() + SETTLE_WAIT_S
        while True:
            try:
                return self._settle_once(run_id, code, why, timeout_s)
            except StoreUnavailable as exc:
                if time.monotonic() >= deadline:
                    log.error("run %s: cannot record how it ended (%s); serve will mark it lost", run_id, exc)
                    return RunStatus.UNKNOWN
                time.sleep(1.0)

    def _settle_once(self, run_id: str, code: int, why: str | None, timeout_s: float | None) -> str:
        """The row's final status. A process that died before writing one ends as serve's stop
        request ``why`` says (killed after its timeout: ``timed_out``), else ``failed`` (worker_died)."""
        ledger.supervisor_end(self.store, run_id, code, why=why, timeout_s=timeout_s)
        row = ledger.get(self.store, run_id)
        status = row.status if row else RunStatus.UNKNOWN
        log.info("run %s ended %s (exit %s)", run_id, status, code)
        return status

    # -- heartbeat and stop requests ---------------------------------------------------------------
    def _heartbeat(self) -> None:
        poll = min(0.5, self.heartbeat_s)
        last_beat = 0.0
        while not self._stopped.wait(poll):
            try:
                now = time.monotonic()
                if now - last_beat >= self.heartbeat_s:
                    self._beat_once()
                    last_beat = now
                self._read_stops()
            except Exception as exc:  # noqa: BLE001 - a store fault: logged; serve sees a stale heartbeat if it lasts
                log.error("worker %s: cannot write the heartbeat: %s", self.name, exc)

    def _beat_once(self) -> None:
        """The heartbeat of the runs this worker holds now (a run it gave up settling has none)."""
        with self._lock:
            held = sorted(self._held)
        if not held:
            return
        ledger.heartbeat(self.store, self.name, held)
        self._fence_lost()

    def _fence_lost(self) -> None:
        """Runs this worker holds that serve declared lost meanwhile (this machine was paused or cut
        off past ``executor.lost_after_s``; the retry policy took over): kill them at once, so a
        healed partition never leaves two attempts of one slot running side by side."""
        with self._lock:
            held = sorted(self._held)
        if not held:
            return
        lost = ledger.lost_among(self.store, held)
        with self._lock:
            for run_id in lost:
                if self._stops.get(run_id) != "kill":
                    log.error("run %s: serve declared it lost (worker_lost) and retried it; killing it here", run_id)
                    self._stops[run_id] = "kill"

    def _read_stops(self) -> None:
        with self._lock:
            if not self._held:
                return
        stops = ledger.stop_requests(self.store, self.name)
        with self._lock:
            self._stops.update(stops)


def mismatch_error(claimed: Claimed, job_name: str) -> str:
    return (
        f"the message names job {job_name!r}, but run {claimed.run_id} is a run of job {claimed.job!r}: "
        "nothing ran (only the scheduler sends runs; check who can write to the broker)"
    )


def register(app: Any, runtime: WorkerRuntime) -> None:
    """The tasks of ``app``, run by ``runtime``: ``runner.execute`` (a scheduled run) and
    ``runner.kanban_attempt`` (an attempt at a kanban task, ``runner.dist.kanban_worker``)."""
    from runner.dist.kanban_worker import Attempt, KanbanAttempts

    @app.task(name=TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
    def execute(run_id: str, jobs_hash: str, job: str) -> str:
        try:
            return runtime.execute(run_id, jobs_hash, job)
        except ClaimDeferred as exc:
            raise requeue(str(exc)) from exc

    attempts = KanbanAttempts(runtime)

    @app.task(name=KANBAN_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
    def kanban_attempt(task_id: int, fence: int, jobs_hash: str, job: str, attempt: int, lease_seconds: float) -> str:
        try:
            return str(attempts.run(Attempt(task_id, fence, jobs_hash, job, attempt, lease_seconds)))
        except ClaimDeferred as exc:
            raise requeue(str(exc)) from exc


def default_hostname() -> str:
    return f"runner@{socket.gethostname()}"


def run_worker(
    settings: Settings, *, hostname: str, concurrency: int, queues: list[str], loglevel: str = "INFO"
) -> int:
    """Start a Celery worker (threads pool) consuming ``queues`` until SIGTERM/SIGINT."""

    app = celery_app(settings.config.executor.broker_url())
    runtime = WorkerRuntime(settings, hostname).start()
    register(app, runtime)
    argv = [
        "worker",
        "--pool=threads",
        f"--concurrency={concurrency}",
        f"--hostname={hostname}",
        f"--queues={','.join(queues)}",
        f"--loglevel={loglevel}",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]
    from celery.signals import worker_shutting_down

    asked: list[str] = []
    worker_shutting_down.connect(lambda sig=None, how=None, exitcode=None, **kw: asked.append(str(how)), weak=False)
    try:
        while True:
            app.worker_main(argv=argv)
            if asked:
                break
            # the consumer gave up on a broker fault it could not recover from (a kombu/redis
            # reconnect bug after a broker restart): start it again rather than leave this
            # machine idle; runs already going continue under this process meanwhile
            log.error(
                "runner worker %s: the Celery worker stopped without being asked; starting it again", runtime.name
            )
            time.sleep(1.0)
    finally:
        runtime.close()
    return 0
