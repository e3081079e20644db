"""The run pool of ``runner serve``: fires waiting for a worker, the overlap policies,
``serve.max_parallel``, worker timeouts, final statuses, retries and failure streaks.

A fire arrives with its ledger row already written (``queued``). The pool decides when (or
whether) it starts, starts it through a ``Spawner``, watches the process, and once it has
ended makes the row tell the truth: the worker's own final status when it wrote one, else
``timed_out`` / ``interrupted`` when serve stopped it, else ``failed`` with the exit code or
signal. Everything runs on serve's main thread.

While the store cannot answer (a lock held past busy_timeout, a full disk), nothing the pool
decided is lost: an ending it could not write is kept and written at a later tick (before
anything else), and a worker's exit it could not record yet is looked at again.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import signal
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from multiprocessing.connection import wait
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from runner.clock import iso
from runner.config.jobfile import Job
from runner.config.jobs import Resume
from runner.delivery.alerts import RunEnd, is_alerted
from runner.host.procs import pid_alive
from runner.mcp.keep import Bridges
from runner.run.protect import protected_set, sandbox_plan
from runner.serve.fire import ActiveRun, Fire, Paths
from runner.serve.host import Clock
from runner.serve.launcher import AdoptedHandle, Handle, Spawner, WorkerSpec
from runner.serve.state import record_slot_result, set_paused
from runner.settings import Settings
from runner.statuses import RunStatus, Trigger
from runner.store import Store, StoreError, StoreFault, ledger
from runner.store.control import trigger_vars_of

if TYPE_CHECKING:
    from runner.backends.sandbox import Plan

FAILED = (RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.UNKNOWN)
SCHEDULED = (Trigger.SCHEDULE, Trigger.RETRY)
RETRIED = (*SCHEDULED, Trigger.MANUAL)  # `runner jobs trigger` runs get the job's retries too
# rows a previous serve left queued that this one starts: besides those, a webhook's (its payload
# is its own row's) and a chained run's (its link names its upstream run); neither is retried
ADOPTED = (*RETRIED, Trigger.WEBHOOK, Trigger.CHAIN)
# unknown: only a run of a lost remote worker ends so here (a local one is made `failed` first)
RETRY_STATUSES = (RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.UNKNOWN)
# a run due this soon has the forkserver started (if it was stopped: serve.forkserver_idle_s) and
# kept: its imports take about a second, well before the slot
NEAR = timedelta(seconds=30)


class Alerts(Protocol):
    """Where the pool reports the endings it decides (timeouts, shutdown, dead workers) and pauses."""

    def run_ended(self, job: Job | None, end: RunEnd) -> None: ...

    def paused(self, job: Job | None, end: RunEnd, why: str) -> None: ...


@dataclass
class _Running:
    fire: Fire
    handle: Handle
    started_at: datetime
    deadline: float
    stop_reason: str | None = None
    term_at: float | None = None
    killed: bool = False


@dataclass(frozen=True)
class _Ending:
    """A final status the pool decided but could not write yet (the store did not answer)."""

    run_id: str
    status: RunStatus
    reason: str
    error: str


@dataclass(order=True)
class _Waiting:
    key: tuple[datetime, int]
    fire: Fire = field(compare=False)
    exclusive: bool = field(compare=False)
    queued_at: datetime = field(compare=False)


def _resumes(fire: Fire, status: RunStatus, reason: str | None) -> bool:
    """An agent run that lost its worker under ``resume: auto`` gets a new attempt at once, which
    resumes from its journal: as many as ``retries.attempts``, at least one. A script-only run has
    no journal (its new attempt would run the script again from the start): its ``retries:`` apply."""
    lost = status == RunStatus.UNKNOWN or (
        status == RunStatus.FAILED and reason in (ledger.Reason.WORKER_DIED, ledger.Reason.WORKER_LOST)
    )
    spec = fire.job.spec
    return lost and spec.agent and spec.resume == Resume.AUTO and fire.attempt <= max(1, spec.retries.attempts)


class Pool:
    name = "pool"

    def __init__(
        self,
        *,
        store: Store,
        spawner: Spawner,
        clock: Clock,
        log: logging.Logger,
        paths: Paths,
        max_parallel: int,
        kill_grace: float,
        on_pause: Callable[[str, str], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        alerts: Alerts | None = None,
        bridges: Bridges | None = None,
        remote: bool = False,
    ):
        """``spawner`` starts workers (``ForkLauncher`` in serve); ``clock`` gives slot and retry times;
        ``monotonic`` measures run timeouts and the kill grace. Tests inject all three."""
        self.store, self.spawner, self.clock, self.log, self.paths = store, spawner, clock, log, paths
        self.monotonic = monotonic
        self.max_parallel = max_parallel
        self.kill_grace = kill_grace
        self.on_pause = on_pause
        self.alerts = alerts
        self.bridges = bridges  # keep-alive MCP servers (runner.mcp.keep), started before a run that needs one
        self.remote = remote  # runs execute on `runner worker`s (executor: celery): they outlive serve
        self.control_inputs: tuple[str, ...] = ()  # set with each (re)load of jobs.yaml
        self._running: dict[str, _Running] = {}
        self._per_job: dict[str, int] = {}
        self._waiting: list[_Waiting] = []
        self._queued: dict[str, int] = {}  # waiting fires per job
        self._seq = itertools.count()
        self._closing = False
        self._unwritten: list[_Ending] = []  # endings to write once the store answers
        self._exited: list[tuple[_Running, int]] = []  # workers gone whose ending is not recorded yet

    # -- views ------------------------------------------------------------------------------
    def active(self) -> tuple[ActiveRun, ...]:
        return tuple(
            ActiveRun(r.fire.run_id, r.fire.job.name, r.fire.trigger, r.handle.pid, r.started_at)
            for r in self._running.values()
        )

    def holds(self, run_id: str) -> bool:
        """Whether ``run_id`` is waiting or running in this pool."""
        return run_id in self._running or any(w.fire.run_id == run_id for w in self._waiting)

    def counts(self) -> tuple[int, int]:
        return len(self._running), len(self._waiting)

    def sentinels(self) -> list[int]:
        """What to wait on for a worker's exit (workers of one forkserver share its socket)."""
        return list(dict.fromkeys(r.handle.sentinel for r in self._running.values()))

    # -- submitting -------------------------------------------------------------------------
    def submit(self, fire: Fire, overlap: str = "allow") -> str:
        """Queue ``fire`` under the job's overlap policy; return ``queued`` or ``skipped``."""
        name = fire.job.name
        # a burst submits hundreds of fires at once: look through the lists only for a job that has some
        running = [r for r in self._running.values() if r.fire.job.name == name] if self._per_job.get(name) else []
        waiting = (
            [w for w in self._waiting if w.fire.job.name == name and (fire.batch is None or w.fire.batch != fire.batch)]
            if self._queued.get(name)
            else []
        )
        forced = fire.batch is not None or fire.trigger == Trigger.RETRY
        if not forced and (running or waiting):
            if overlap == "skip" or (overlap == "queue" and waiting):
                other = (running[0].fire if running else waiting[0].fire).run_id
                self._finish(fire.run_id, RunStatus.SKIPPED, "overlap", f"run {other} of this job was still going")
                self.log.info("skipped %s slot %s: overlap with run %s", name, _when(fire.slot), other)
                return RunStatus.SKIPPED
            if overlap == "replace":
                for r in running:
                    self.log.info("replacing run %s of %s with %s", r.fire.run_id, name, fire.run_id)
                    self._stop(r, "replaced")
                for w in waiting:
                    self._unqueue(w)
                    self._finish(w.fire.run_id, RunStatus.SKIPPED, "replaced", f"replaced by run {fire.run_id}")
        key_time = fire.not_before or fire.slot or self.clock.now()
        entry = _Waiting((key_time, next(self._seq)), fire, forced or overlap != "allow", self.clock.now())
        bisect.insort(self._waiting, entry)
        self._queued[name] = self._queued.get(name, 0) + 1
        self.pump()
        return RunStatus.QUEUED

    def drop(self, run_id: str, *, by: str) -> bool:
        """A waiting (not yet started) fire that was cancelled ends ``interrupted`` (reason
        ``cancelled``) without starting; False when ``run_id`` is not waiting here."""
        for entry in self._waiting:
            if entry.fire.run_id == run_id:
                self._unqueue(entry)
                error = f"cancelled by {by} (runner runs cancel) before it started"
                self._finish(run_id, RunStatus.INTERRUPTED, "cancelled", error)
                self.log.info("cancelled %s run %s before it started (by %s)", entry.fire.job.name, run_id, by)
                return True
        return False

    def _finish(self, run_id: str, status: RunStatus, reason: str, error: str) -> bool:
        """Write a final status the pool decided (False: the run had ended already); one the store
        cannot take now is kept and written at a later tick (``flush``): the decision stands."""
        try:
            return ledger.finish(self.store, run_id, status, reason=reason, error=error)
        except StoreFault as exc:
            if not exc.transient:
                raise
            self.log.warning(
                "run %s ended %s (%s); the store cannot take it now, kept for later: %s", run_id, status, reason, exc
            )
            self._unwritten.append(_Ending(run_id, status, reason, error))
            return True

    def flush(self) -> None:
        """Write the endings the store could not take earlier (raises while it still cannot)."""
        while self._unwritten:
            e = self._unwritten[0]
            ledger.finish(self.store, e.run_id, e.status, reason=e.reason, error=e.error)
            self._unwritten.pop(0)
            self.log.info("run %s: its ending (%s) is written now", e.run_id, e.status)

    def _unqueue(self, entry: _Waiting) -> None:
        self._waiting.remove(entry)
        self._queued[entry.fire.job.name] -= 1

    def pump(self) -> None:
        """Start waiting fires, oldest slot first, while there is room."""
        if not self._waiting or len(self._running) >= self.max_parallel:
            return
        now = self.clock.now()
        for entry in list(self._waiting):
            if len(self._running) >= self.max_parallel:
                break
            fire = entry.fire
            if fire.not_before is not None and fire.not_before > now:
                continue
            if entry.exclusive and self._per_job.get(fire.job.name):
                continue
            self._unqueue(entry)
            self._start(entry, now)

    def _start(self, entry: _Waiting, now: datetime) -> None:
        fire = entry.fire
        waited = max(0.0, (now - (fire.not_before or entry.queued_at)).total_seconds())
        spec = WorkerSpec(
            home=self.paths.home,
            jobs_path=self.paths.jobs,
            config_path=self.paths.config,
            job=fire.job,
            run_id=fire.run_id,
            trigger=fire.trigger,
            slot=fire.slot,
            task_id=fire.task_id,
            vars=fire.vars,
            control_inputs=self.control_inputs,
            waited_s=round(waited, 3),  # the worker writes it with its start: nothing written here
        )
        if self.bridges is not None and not self.remote:
            job = fire.job
            plan = self._sandbox_plan(job) if job.sandboxed else None
            self.bridges.prepare(job.name, job.spec.toolsets, job.spec.backend.type == "local", job.workdir, plan)
        try:
            handle = self.spawner.spawn(spec)
        except OSError as exc:
            self.log.error("cannot start a worker for %s (run %s): %s", fire.job.name, fire.run_id, exc)
            error = f"cannot start a worker: {exc}"
            self._finish(fire.run_id, RunStatus.FAILED, "spawn", error)
            self._alert(fire, RunEnd(fire.job.name, fire.run_id, RunStatus.FAILED, "spawn", error))
            return
        self._running[fire.run_id] = _Running(fire, handle, now, self.monotonic() + fire.job.spec.timeout)
        self._per_job[fire.job.name] = self._per_job.get(fire.job.name, 0) + 1
        self.log.info("started %s run %s (waited %.3fs)", fire.job.name, fire.run_id, waited)

    def _sandbox_plan(self, job: Job) -> Plan:
        """The sandbox a run of ``job`` gets (its kept MCP servers run in the same)."""

        paths = self.paths
        settings = Settings(home=Path(paths.home), jobs_path=Path(paths.jobs), config_path=Path(paths.config))
        control = protected_set(settings, job, inputs=self.control_inputs)
        return sandbox_plan(settings, job, control, job.workdir)

    def expect(self, runs: int) -> None:
        """``runs`` script-only fires are due within seconds: have workers ready for as many of
        them as ``max_parallel`` will start at once."""
        room = min(runs, self.max_parallel - len(self._running))
        if room <= 0 or self.remote:
            return
        try:
            self.spawner.prewarm(room)
        except OSError as exc:  # the forkserver cannot fork now: the runs start cold (or fail) at their slot
            self.log.warning("cannot start workers ahead of the next slot: %s", exc)

    def near(self) -> None:
        """A run is due within ``NEAR``: the spawner gets ready for it (serve's forkserver is
        started if it was stopped)."""
        try:
            self.spawner.near()
        except OSError as exc:  # the forkserver cannot start now: the run starts it at its slot (or fails)
            self.log.warning("cannot start the forkserver ahead of the next run: %s", exc)

    # -- the loop ----------------------------------------------------------------------------
    def tick(self, now: datetime) -> None:
        self.enforce()
        self.flush()
        self.reap()
        if self._waiting and self._waiting[0].key[0] <= now + NEAR:
            self.near()  # a run waiting for room, or a retry whose backoff ends soon
        self.spawner.tidy()
        if self.bridges is not None:
            self.bridges.refresh()
        self.pump()

    def enforce(self) -> None:
        """Stop runs past their timeout, kill those past the kill grace: signals (and a stop
        request the ledger may refuse to take now), so serve does it also in a round the store
        could not answer (``runner.serve.daemon``)."""
        mono = self.monotonic()
        for run in list(self._running.values()):
            if run.handle.poll() is not None:
                continue  # gone: reap() records it
            if run.stop_reason is None and mono >= run.deadline:
                self.log.warning("run %s of %s hit its timeout; stopping it", run.fire.run_id, run.fire.job.name)
                self._stop(run, "timeout")
            elif run.term_at is not None and not run.killed and mono >= run.term_at + self.kill_grace:
                self.log.warning("run %s did not stop within %.1fs; killing it", run.fire.run_id, self.kill_grace)
                run.handle.signal_tree(signal.SIGKILL)
                run.killed = True

    def next_wake(self, now: datetime) -> datetime | None:
        if self._exited or any(r.handle.poll() is not None for r in self._running.values()):
            return now  # an exit already read (while starting another worker) is not waited for again
        mono = self.monotonic()
        times: list[datetime] = []
        for run in self._running.values():
            if run.stop_reason is None:
                times.append(now + timedelta(seconds=run.deadline - mono))
            elif run.term_at is not None and not run.killed:
                times.append(now + timedelta(seconds=run.term_at + self.kill_grace - mono))
        times.extend(w.fire.not_before for w in self._waiting if w.fire.not_before is not None)
        return min(times, default=None)

    def close(self) -> None:
        self.shutdown(0.0)

    def _stop(self, run: _Running, reason: str) -> None:
        """Stop a run for ``reason`` (timeout, shutdown, replaced): the ledger learns why first, so
        the run records its own end with that reason; then SIGTERM (and SIGKILL after the grace)."""
        run.stop_reason = reason
        run.term_at = self.monotonic()
        if reason in ledger.STOP_WHY:
            try:
                ledger.request_stop(self.store, run.fire.run_id, reason)
            except StoreError as exc:  # the signal still goes; _finalize records the reason then
                self.log.warning("run %s: cannot record why it is stopped (%s): %s", run.fire.run_id, reason, exc)
        run.handle.signal_tree(signal.SIGTERM)

    def reap(self) -> None:
        for run in list(self._running.values()):
            code = run.handle.poll()
            if code is None:
                continue
            del self._running[run.fire.run_id]
            self._per_job[run.fire.job.name] -= 1
            if run.stop_reason is not None:
                run.handle.signal_tree(signal.SIGKILL)  # children that outlived the worker
            run.handle.close()
            self._exited.append((run, code))
        while self._exited:  # a store fault leaves the rest for the next tick
            self._finalize(*self._exited[0])
            self._exited.pop(0)

    # -- endings -------------------------------------------------------------------------------
    def _finalize(self, run: _Running, code: int) -> None:
        """The worker has exited. It recorded its run's end itself (also when serve stopped it: the
        ledger told it why); when it could not (killed, crashed), serve records it here, only if
        the row is still active (the ledger refuses to change an end)."""
        fire = run.fire
        reason: str | None
        won, status, reason, error = ledger.supervisor_end(
            self.store, fire.run_id, code, why=run.stop_reason, timeout_s=fire.job.spec.timeout, sweep=not self.remote
        )
        if won:
            self._alert(fire, RunEnd(fire.job.name, fire.run_id, status, reason, error))
        else:
            row = ledger.get(self.store, fire.run_id)
            status = row.status if row else RunStatus.UNKNOWN
            reason = row.reason if row else None
            if row is not None and row.status == RunStatus.UNKNOWN:  # declared lost (worker_lost)
                self._alert(fire, RunEnd(fire.job.name, fire.run_id, status, reason, "its worker was lost"))
            elif row is not None and run.stop_reason is not None and row.status != RunStatus.SUCCEEDED:
                self._alert(fire, RunEnd(fire.job.name, fire.run_id, status, reason, row.error or ""))
        self.log.info(
            "finished %s run %s: %s%s (pid %d, exit %s)",
            fire.job.name,
            fire.run_id,
            status,
            f" ({reason})" if reason else "",
            run.handle.pid,
            code,
        )
        if fire.trigger not in RETRIED:
            return
        retries = fire.job.spec.retries
        if _resumes(fire, status, reason) and not self._closing:
            self.log.info("%s run %s lost its worker: resuming it from its journal", fire.job.name, fire.run_id)
            self._retry(fire, 0.0)
        elif status in RETRY_STATUSES and fire.attempt <= retries.attempts and not self._closing:
            self._retry(fire, retries.backoff * 2 ** (fire.attempt - 1))
        elif fire.trigger in SCHEDULED and status in (*FAILED, RunStatus.SUCCEEDED, RunStatus.SKIPPED):
            self._streak(fire, RunEnd(fire.job.name, fire.run_id, status, reason))

    def _alert(self, fire: Fire, end: RunEnd) -> None:
        if self.alerts is not None and is_alerted(end.status, end.reason):
            self.alerts.run_ended(fire.job, end)

    def _retry(self, fire: Fire, delay: float) -> None:
        due = self.clock.now() + timedelta(seconds=delay)
        root = fire.root_run or fire.run_id
        try:
            with self.store.transaction():
                run_id = ledger.open_run(
                    self.store,
                    job=fire.job.name,
                    trigger=Trigger.RETRY,
                    status=RunStatus.QUEUED,
                    slot=fire.slot,
                    attempt=fire.attempt + 1,
                    parent_run=root,
                )
                ledger.set_fields(self.store, run_id, not_before=iso(due))
        except sqlite3.IntegrityError:
            self.log.warning(
                "%s slot %s attempt %d is already in the ledger", fire.job.name, _when(fire.slot), fire.attempt + 1
            )
            return
        self.log.info("retrying %s (attempt %d, run %s) at %s", fire.job.name, fire.attempt + 1, run_id, iso(due))
        retry = Fire(run_id, fire.job, fire.slot, Trigger.RETRY, fire.attempt + 1, root, fire.task_id, None, due, fire.vars)
        self.submit(retry)

    def _streak(self, fire: Fire, end: RunEnd) -> None:
        failed = end.status in FAILED
        streak = record_slot_result(self.store, fire.job.name, failed)
        limit = fire.job.spec.pause_after_failures
        if failed and limit is not None and streak >= limit:
            why = f"paused after {streak} consecutive failed slots (last run {fire.run_id})"
            set_paused(self.store, fire.job.name, True, why)
            self.log.warning("%s %s; resume with: runner jobs resume %s", fire.job.name, why, fire.job.name)
            if self.on_pause is not None:
                self.on_pause(fire.job.name, why)
            if self.alerts is not None:
                self.alerts.paused(fire.job, end, why)

    # -- start-up and shutdown -------------------------------------------------------------------
    def follow(self, fire: Fire, handle: Handle, started_at: datetime) -> None:
        """Track a run that already executes elsewhere (a remote worker took it from a previous
        leader): its timeout counts from ``started_at``."""
        now = self.clock.now()
        elapsed = max(0.0, (now - started_at).total_seconds())
        deadline = self.monotonic() + fire.job.spec.timeout - elapsed
        self._running[fire.run_id] = _Running(fire, handle, started_at, deadline)
        self._per_job[fire.job.name] = self._per_job.get(fire.job.name, 0) + 1

    def adopt_running(self, jobs: dict[str, Job]) -> int:
        """Follow the runs a previous serve on this host started and left running when it died
        (their processes go on): by pid and start time, so each job's timeout and overlap policy
        count them before the job fires again. A run of a job no longer in jobs.yaml is stopped."""

        count = 0
        for row in ledger.running_here(self.store, RETRIED):
            if row.id in self._running or not row.pid or not pid_alive(row.pid, row.pid_start):
                continue  # ours already, or gone (the store's recovery marks it)
            try:
                handle = AdoptedHandle(row.pid, row.pid_start)
            except OSError:
                continue  # it ended just now
            job = jobs.get(row.job)
            if job is None:
                handle.signal_tree(signal.SIGTERM)
                handle.close()
                continue
            slot = datetime.fromisoformat(row.slot) if row.slot else None
            fire = Fire(row.id, job, slot, row.trigger, int(row.attempt or 1), row.parent_run, row.task_id, "adopted")
            started = datetime.fromisoformat(row.started_at) if row.started_at else self.clock.now()
            self.follow(fire, handle, started)
            self.log.warning("adopted run %s of %s (pid %d): a previous serve left it running", row.id, row.job, row.pid)
            count += 1
        return count

    def adopt(self, jobs: dict[str, Job]) -> int:
        """Queue the rows a previous serve left ``queued`` (pending retries, or fires and
        triggers it had not started when it died)."""
        rows = ledger.queued_to_adopt(self.store, ADOPTED)
        for row in rows:
            job = jobs.get(row.job)
            if job is None:
                self._finish(row.id, RunStatus.INTERRUPTED, "job_removed", "the job is no longer in jobs.yaml")
                continue
            slot = datetime.fromisoformat(row.slot) if row.slot else None
            due = datetime.fromisoformat(row.not_before) if row.not_before else None
            vars = trigger_vars_of(self.store, row.parent_run or row.id)  # a trigger's --var, also on its retries
            fire = Fire(
                row.id, job, slot, row.trigger, int(row.attempt or 1), row.parent_run, row.task_id, "adopted", due, vars
            )
            self.submit(fire)
        return len(rows)

    def shutdown(self, grace: float, hurry: Callable[[], bool] = lambda: False) -> None:
        """Stop everything: waiting fires end ``interrupted`` (retries not yet due stay queued for
        the next serve) and are alerted as the running ones are, running workers get SIGTERM, then
        SIGKILL after ``grace`` seconds. Endings the store cannot take are logged: the next serve's
        start finds those rows (``queued``: adopted; ``running``: recovered)."""
        self._closing = True
        now = self.clock.now()
        for entry in self._waiting:
            fire = entry.fire
            if fire.trigger == Trigger.RETRY and fire.not_before and fire.not_before > now:
                continue
            error = "serve stopped before it started"
            if self._finish(fire.run_id, RunStatus.INTERRUPTED, "shutdown", error):
                self._alert(fire, RunEnd(fire.job.name, fire.run_id, RunStatus.INTERRUPTED, "shutdown", error))
        self._waiting.clear()
        self._queued.clear()
        if self.remote:  # runs on workers go on; the next leader follows them (adopt)
            for run in list(self._running.values()):
                run.handle.close()
            self._running.clear()
            return
        for run in self._running.values():
            self._stop(run, "shutdown")
        deadline = time.monotonic() + grace
        while self._running and time.monotonic() < deadline and not hurry():
            wait(self.sentinels(), timeout=min(0.2, max(0.0, deadline - time.monotonic())))
            self._reap_at_shutdown()
        for run in self._running.values():
            run.handle.signal_tree(signal.SIGKILL)
            run.killed = True
        deadline = time.monotonic() + 10
        while self._running and time.monotonic() < deadline:
            wait(self.sentinels(), timeout=0.2)
            self._reap_at_shutdown()
        try:
            self.flush()
        except StoreFault as exc:
            self.log.error("%d run ending(s) not written, the store cannot answer: %s", len(self._unwritten), exc)

    def _reap_at_shutdown(self) -> None:
        try:
            self.reap()
        except StoreFault as exc:  # the exit is kept (self._exited) and looked at again
            self.log.error("cannot record a worker's end now: %s", exc)


def _when(slot: datetime | None) -> str:
    return iso(slot) or "-"
