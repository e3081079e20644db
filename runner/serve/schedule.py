"""The schedule loop of ``runner serve``: turns due slots into ledger rows and hands the runs
to the pool.

Each scheduled job is an entry with its stored ``JobState`` and the time it next fires, kept
in a heap. When an entry is due, ``runner.serve.planner.plan`` decides what each due slot becomes;
this module writes the decisions of every job due at that moment (``missed`` rows, ``queued``
rows, the new last slots) in one transaction and then submits the queued runs; a row's
``created_at`` is the time of its insert, so the ledger shows how late a fire was written. The unique ``(job, slot, attempt)`` index is the last
word: a slot that already has a row (another process got there first) is not run again.

It also takes the control requests meant for serve (``runner.store.control``): ``runner jobs trigger``
rows become ``queued`` runs (trigger ``manual``; the request's ``--var`` template variables go with
the ``Fire`` to the run's ``vars_override``) submitted to the pool under the job's overlap
policy (a webhook's request names the ``queued`` row the web process wrote: ``runner.store.hooks``),
and a cancel of a run still waiting in the pool ends it there. It looks whenever another
process committed to runner.db (``PRAGMA data_version``, read every tick: no query while nothing
changes) and asks to be woken every ``check`` seconds for it; a request written while serve was
down is taken at its first tick.

Chained jobs (``after:``) are started here too: at each look (and every ``POLL_S``), each
upstream run that ended as its edge's ``when`` asks and started no run of the downstream job yet
gets one (trigger ``chain``; the link and the row in one transaction, so once per upstream run,
also for a run that ended while serve was down).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from runner.clock import iso
from runner.config.jobfile import Job, inputs_of
from runner.config.schedules import Schedule
from runner.serve.planner import (
    JobState,
    Plan,
    catchup_window,
    effective_schedule,
    fire_time,
    first_sight,
    first_slot,
    plan,
)
from runner.serve.pool import NEAR, Fire, Pool
from runner.serve.state import load_states, paused_jobs, save_sight, set_last_slot
from runner.statuses import RunStatus, Trigger
from runner.store import Store, followups, ledger
from runner.store.control import TriggerRequest, mark_handled, open_triggers, queued_cancels
from runner.store.hooks import due_chains, open_chained, see_edges

POLL_S = 1.0  # how often pause flags set by `runner jobs pause|resume` are read
AHEAD = timedelta(seconds=10)  # script-only slots due this soon get their workers started ahead


@dataclass
class _Entry:
    job: Job
    sched: Schedule
    window: float
    state: JobState
    version: int
    fire_at: datetime | None = None


@dataclass(frozen=True)
class JobsChange:
    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]

    def __str__(self) -> str:
        parts = [
            f"{sign}{', '.join(names)}"
            for sign, names in (("+", self.added), ("-", self.removed), ("~", self.changed))
            if names
        ]
        return " ".join(parts) or "no changes"


class ScheduleTicker:
    name = "schedule"

    def __init__(self, *, store: Store, pool: Pool, log: logging.Logger, check: float | None = None):
        """``check``: seconds between looks for control requests (serve: 0.05); None looks at every
        tick without asking to be woken for it (in-process tests on an injected clock)."""
        self.store, self.pool, self.log = store, pool, log
        self.check = timedelta(seconds=check) if check is not None else None
        self._all: dict[str, Job] = {}  # every job, scheduled or not (a trigger may name any)
        self._chained: tuple[Job, ...] = ()  # the jobs with ``after:`` (looked at every second)
        self._paused: set[str] = set()  # scheduled jobs whose state says paused
        self._seen_version = -1
        self._entries: dict[str, _Entry] = {}
        self._heap: list[tuple[datetime, int, str]] = []
        self._versions = itertools.count()
        self._next_poll: datetime | None = None
        self._expected: datetime | None = None  # the first fire time workers were started for

    @property
    def jobs(self) -> dict[str, Job]:
        return {name: e.job for name, e in self._entries.items()}

    def all_jobs(self) -> Mapping[str, Job]:
        """Every job loaded now, scheduled or not."""
        return self._all

    # -- jobs in, jobs out ---------------------------------------------------------------------
    def set_jobs(self, jobs: Mapping[str, Job], now: datetime) -> JobsChange:
        """Install a (re)loaded set of jobs: new ones are seen for the first time, removed ones
        stop firing, changed ones are rescheduled (a changed schedule starts afresh)."""
        self.pool.control_inputs = tuple(str(p) for p in inputs_of(jobs))  # what each run protects
        self._all = dict(jobs)
        self._chained = tuple(job for job in jobs.values() if job.spec.after_spec is not None)
        see_edges(self.store, [(n, up) for n, j in sorted(jobs.items()) for up in j.spec.after_jobs], now=now)
        states = load_states(self.store)
        scheduled = {n: j for n, j in jobs.items() if j.schedule_obj is not None}
        removed = tuple(sorted(set(self._entries) - set(scheduled)))
        for name in removed:
            del self._entries[name]
        added: list[str] = []
        changed: list[str] = []
        for name, job in sorted(scheduled.items()):
            old = self._entries.get(name)
            if old is not None and old.job == job:
                continue
            (changed if old is not None else added).append(name)
            state = states.get(name) or JobState(job=name)
            if not state.seen(job):
                state = first_sight(job, now, state)
                save_sight(self.store, state, now=now)
            sched = effective_schedule(job, state)
            assert sched is not None
            entry = _Entry(job, sched, catchup_window(job, sched, now), state, next(self._versions))
            slot = first_slot(sched, state)
            self._schedule(entry, fire_time(job, slot) if slot is not None else None)
        return JobsChange(tuple(added), removed, tuple(changed))

    def mark_paused(self, name: str, reason: str | None) -> None:
        entry = self._entries.get(name)
        if entry is not None:
            entry.state = replace(entry.state, paused=True, paused_reason=reason)
            self._paused.add(name)

    def _schedule(self, entry: _Entry, fire_at: datetime | None) -> None:
        entry.fire_at = fire_at
        self._entries[entry.job.name] = entry
        if entry.state.paused:
            self._paused.add(entry.job.name)
        else:
            self._paused.discard(entry.job.name)
        if fire_at is not None:
            heapq.heappush(self._heap, (fire_at, entry.version, entry.job.name))

    # -- the ticker ----------------------------------------------------------------------------
    def _expect(self, now: datetime) -> None:
        """Once per coming fire time: tell the pool how many script-only runs are due within
        ``AHEAD``, so their workers start and warm up before the slot (runner.serve.reuse)."""
        if not self._heap or self._heap[0][0] > now + AHEAD or self._heap[0][0] == self._expected:
            return
        self._expected = self._heap[0][0]
        soon = 0
        for at, version, name in self._heap:
            entry = self._entries.get(name)
            if at <= now + AHEAD and entry is not None and entry.version == version and not entry.job.spec.agent:
                soon += 1
        if soon:
            self.pool.expect(soon)

    def next_wake(self, now: datetime) -> datetime | None:
        check = now + self.check if self.check is not None else None
        times = [t for t in (self._heap[0][0] if self._heap else None, self._next_poll, check) if t is not None]
        return min(times, default=None)

    def tick(self, now: datetime) -> None:
        self._requests()
        if self._next_poll is None or now >= self._next_poll:
            self._poll_pauses()
            self._chains(now)
            self._followups(now)
            self._next_poll = now + timedelta(seconds=POLL_S)
        due: list[_Entry] = []
        while self._heap and self._heap[0][0] <= now:
            _, version, name = heapq.heappop(self._heap)
            entry = self._entries.get(name)
            if entry is not None and entry.version == version:
                due.append(entry)
        if due:
            self._fire(due, now)
        if self._heap and self._heap[0][0] <= now + NEAR:
            self.pool.near()
        self._expect(now)

    def close(self) -> None:
        self._heap.clear()

    # -- control requests ----------------------------------------------------------------------
    def _requests(self) -> None:
        """Triggers and cancels of queued runs, when another process committed since the last look."""
        version = self.store.conn.execute("PRAGMA data_version").fetchone()[0]
        if version == self._seen_version:
            return
        for request in open_triggers(self.store):
            self._trigger(request)
        self._chains(self.pool.clock.now())
        for request_id, run_id, by in queued_cancels(self.store):
            if self.pool.drop(run_id, by=by):
                with self.store.transaction():
                    mark_handled(self.store, request_id, "dropped before it started")
        self._seen_version = version  # only now: a request the store could not take is looked at again

    def _trigger(self, request: TriggerRequest) -> None:
        """A ``runner jobs trigger``: a ``queued`` row (trigger ``manual``) and a fire for the pool,
        the row and the request's ``handled`` mark in one transaction."""
        job = self._all.get(request.job)
        if request.run_id is not None:
            self._queued_trigger(request, job)
            return
        with self.store.transaction():
            if job is None:
                mark_handled(self.store, request.id, f"no job {request.job} in jobs.yaml")
                self.log.warning("trigger %s: no job %s in jobs.yaml; ignored", request.id, request.job)
                return
            run_id = ledger.open_run(
                self.store, job=job.name, trigger=Trigger.MANUAL, status=RunStatus.QUEUED, now=self.pool.clock.now()
            )
            mark_handled(self.store, request.id, run_id)
        self.log.info("triggered %s by %s (request %s, run %s)", job.name, request.requested_by, request.id, run_id)
        self.pool.submit(Fire(run_id, job, None, Trigger.MANUAL, vars=request.vars), job.spec.overlap)

    def _queued_trigger(self, request: TriggerRequest, job: Job | None) -> None:
        """A request whose ``queued`` row is written (a webhook's): handled, and the row to the pool
        unless it is there already (adopted at start) or ended (cancelled while serve was down)."""
        run_id = request.run_id
        assert run_id is not None
        row = ledger.get(self.store, run_id)
        with self.store.transaction():
            if not mark_handled(self.store, request.id, run_id):
                return
        if job is None:
            ledger.finish(self.store, run_id, RunStatus.INTERRUPTED, reason="job_removed", error="the job is no longer in jobs.yaml")
            self.log.warning("%s %s: no job %s in jobs.yaml; run %s not started", request.requested_by, request.id, request.job, run_id)
            return
        if row is None or row.status != RunStatus.QUEUED or self.pool.holds(run_id):
            return
        trigger = Trigger(row.trigger)
        self.log.info("triggered %s by %s (request %s, run %s)", job.name, request.requested_by, request.id, run_id)
        self.pool.submit(Fire(run_id, job, None, trigger), job.spec.overlap)

    def _chains(self, now: datetime) -> None:
        """Start the downstream runs of upstream runs that ended (``after:``), each once."""
        for job in self._chained:
            after = job.spec.after_spec
            assert after is not None
            for upstream_run, upstream in due_chains(self.store, job.name, after.jobs, after.when, now=now):
                run_id = open_chained(self.store, job=job.name, upstream_run_id=upstream_run, now=self.pool.clock.now())
                if run_id is None:
                    continue
                self.log.info("chained %s after %s run %s (run %s)", job.name, upstream, upstream_run, run_id)
                self.pool.submit(Fire(run_id, job, None, Trigger.CHAIN), job.spec.overlap)

    def _followups(self, now: datetime) -> None:
        """Follow-ups whose time came (``schedule_followup``): each claimed and its ``queued`` row
        (trigger ``followup``) written in one transaction, so it fires once whatever else serves."""
        for followup in followups.due(self.store, now):
            job = self._all.get(followup.job)
            entry = self._entries.get(followup.job)
            if job is not None and (not job.spec.enabled or (entry is not None and entry.state.paused)):
                continue  # fires once the job is enabled and resumed again
            run_id = ledger.new_run_id(now) if job is not None else ""
            with self.store.transaction():
                if not followups.claim(self.store, followup.id, run_id, now):
                    continue  # another serve fired it, or it was cancelled, meanwhile
                if job is not None:
                    ledger.open_run(
                        self.store,
                        job=job.name,
                        trigger=Trigger.FOLLOWUP,
                        status=RunStatus.QUEUED,
                        run_id=run_id,
                        now=now,
                    )
            if job is None:
                self.log.warning("follow-up %s: no job %s in jobs.yaml; dropped", followup.id, followup.job)
                continue
            self.log.info(
                "follow-up %s of %s fired (asked by run %s): run %s", followup.id, job.name, followup.run_id, run_id
            )
            self.pool.submit(Fire(run_id, job, None, Trigger.FOLLOWUP), job.spec.overlap)

    def _poll_pauses(self) -> None:
        """Pause flags set or lifted since the last look (only the jobs paused now or before are
        looked at: a second's look costs nothing per job)."""
        flags = paused_jobs(self.store)
        for name in sorted(flags.keys() | self._paused):
            entry = self._entries.get(name)
            if entry is None:
                self._paused.discard(name)
                continue
            paused = name in flags
            if paused != entry.state.paused:
                entry.state = replace(entry.state, paused=paused, paused_reason=flags.get(name))
                self.log.info("%s %s", name, f"paused ({flags.get(name)})" if paused else "resumed")
            if paused:
                self._paused.add(name)
            else:
                self._paused.discard(name)

    def _fire(self, due: list[_Entry], now: datetime) -> None:
        """Every job due at this moment: the decisions of all of them are written in one
        transaction (a burst of 1,000 fires is one commit), then the runs go to the pool. They are
        decided once the write lock is held, on the clock read then: a wait for the lock (another
        process held it up to busy_timeout) does not make the plan stale."""
        try:
            with self.store.transaction():
                now = max(now, self.pool.clock.now())
                decided = [(entry, self._plan(entry, now)) for entry in due]
                written = [(entry, decision, self._write(entry, decision, now)) for entry, decision in decided]
        except BaseException:
            for entry in due:  # nothing was committed (the store went away): due again at the next tick
                self._schedule(entry, entry.fire_at)
            raise
        for entry, decision, fires in written:
            self._after(entry, decision, fires)

    def _plan(self, entry: _Entry, now: datetime) -> Plan:
        active = entry.job.spec.enabled and not entry.state.paused
        return plan(entry.job, entry.sched, entry.state, now, window=entry.window, active=active)

    def _write(self, entry: _Entry, decision: Plan, now: datetime) -> list[Fire]:
        """The ledger rows of one job's decision (inside the caller's transaction): ``missed``
        rows, ``queued`` rows whose ``created_at`` is the time of the insert, the new last slot."""
        job = entry.job
        for i, (slot, reason) in enumerate(decision.missed):
            self._missed(job, slot, reason, now, decision.note if i == 0 else None)
        fires: list[Fire] = []
        for slot in decision.runs:
            try:
                run_id = ledger.open_run(
                    self.store,
                    job=job.name,
                    trigger=Trigger.SCHEDULE,
                    status=RunStatus.QUEUED,
                    slot=slot,
                    now=self.pool.clock.now(),  # read at the insert, not the tick's reading
                    waited_s=0.0,
                )
            except sqlite3.IntegrityError:
                self.log.warning("%s slot %s already has a ledger row; not running it again", job.name, iso(slot))
                continue
            fires.append(Fire(run_id, job, slot))
        if decision.last_slot != entry.state.last_slot:
            set_last_slot(self.store, job.name, decision.last_slot)
        return fires

    def _after(self, entry: _Entry, decision: Plan, fires: list[Fire]) -> None:
        """The committed decision of one job: its next fire time, the log, the runs to the pool."""
        job = entry.job
        entry.state = replace(entry.state, last_slot=decision.last_slot)
        self._schedule(entry, decision.next_fire)
        if decision.consumed:
            why = "paused" if entry.state.paused else "disabled"
            self.log.info("%s is %s: %d slot(s) passed over", job.name, why, decision.consumed)
        if decision.missed:
            self.log.warning(
                "%s: %d slot(s) recorded missed (catchup: %s), %d to run now",
                job.name,
                len(decision.missed),
                job.spec.catchup,
                len(fires),
            )
        batch = fires[0].run_id if len(fires) > 1 else None
        for fire in fires:
            self.log.info("fired %s slot %s (run %s)", job.name, iso(fire.slot), fire.run_id)
            self.pool.submit(replace(fire, batch=batch), job.spec.overlap)

    def _missed(self, job: Job, slot: datetime, reason: str, now: datetime, note: str | None) -> None:
        late = "serve did not fire this slot in time (it was not running, or its store could not answer)"
        errors = {
            "outside_window": f"{late}, and it is older than the catch-up window",
            "catchup_skip": f"{late}; catchup: skip",
            "catchup_once": f"{late}; catchup: once runs only the latest",
            "catchup_limit": f"{late}; catchup: all runs at most 100 slots",
        }
        error = errors[reason] + (f"; {note}" if note else "")
        try:
            ledger.open_run(
                self.store,
                job=job.name,
                trigger=Trigger.SCHEDULE,
                status=RunStatus.MISSED,
                slot=slot,
                now=now,
                reason=reason,
                error=error,
            )
        except sqlite3.IntegrityError:
            return  # already recorded (by another process): nothing to add
