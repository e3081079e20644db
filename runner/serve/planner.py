"""Pure scheduling decisions: which slots of a job are due at ``now`` and what happens to each.

Nothing here touches the store, the clock or processes; ``runner/serve/schedule.py`` feeds it the job,
its stored ``JobState`` and the time, and writes the result to the ledger. That keeps every
rule (first sight, catch-up, jitter, DST through ``CronSchedule``) testable with plain values.

Terms: a *slot* is the nominal time a schedule names (the ledger's ``(job, slot)`` identity);
a slot *fires* at ``slot + jitter``. A slot that fires within ``ON_TIME_S`` of its fire time is
on time; any older due slot was missed, and the job's ``catchup`` policy decides whether it
runs now or is recorded ``missed``.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from runner.config.schedules import CronSchedule, IntervalSchedule, OneShotSchedule, Schedule

if TYPE_CHECKING:  # used for: name, spec.schedule, spec.enabled, spec.jitter, schedule_obj
    from runner.config.jobs import Job

ON_TIME_S = 30.0  # a slot fired at most this late is on time, not caught up
MIN_WINDOW_S = 120.0
MAX_WINDOW_S = 86_400.0
MAX_CATCHUP_RUNS = 100  # catchup: all runs at most this many missed slots
MAX_MISSED_ROWS = 1000  # newest missed slots recorded one row each; older ones are counted
LOOKBACK = timedelta(days=7)  # missed slots older than this are summarised, not enumerated


@dataclass(frozen=True)
class JobState:
    """What the store remembers about a scheduled job between fires and restarts."""

    job: str
    schedule: str | None = None  # the schedule text the state below belongs to
    first_seen: datetime | None = None
    last_slot: datetime | None = None  # newest slot that got a ledger row (or was consumed while paused)
    resolved_at: datetime | None = None  # `in` one-shots: the fire time; `every`: the first slot
    paused: bool = False
    paused_reason: str | None = None
    failure_streak: int = 0

    def seen(self, job: Job) -> bool:
        return self.first_seen is not None and self.schedule == job.spec.schedule


@dataclass(frozen=True)
class Plan:
    """The decision for one job at one moment."""

    runs: tuple[datetime, ...] = ()  # slots to run now, oldest first
    missed: tuple[tuple[datetime, str], ...] = ()  # (slot, reason) recorded as `missed`
    consumed: int = 0  # slots passed over silently because the job is paused or disabled
    last_slot: datetime | None = None  # store this as the job's last slot
    next_fire: datetime | None = None  # when to look at the job again (slot + jitter)
    note: str | None = None  # about missed slots older than the ones listed


def first_sight(job: Job, now: datetime, previous: JobState | None = None) -> JobState:
    """State for a job serve has not seen with this schedule before: `in` and `every` are
    fixed to absolute times now, so a restart does not push them back. Times are kept to the
    millisecond, the precision of the store, so a restart computes the very same slots."""
    now = now.replace(microsecond=now.microsecond // 1000 * 1000)
    sched = job.schedule_obj
    resolved = None
    if isinstance(sched, OneShotSchedule) and sched.at is None:
        resolved = sched.resolved(now).at
    elif isinstance(sched, IntervalSchedule):
        resolved = sched.anchor or now + timedelta(seconds=sched.seconds)
    keep = previous or JobState(job=job.name)
    return replace(keep, job=job.name, schedule=job.spec.schedule, first_seen=now, last_slot=None, resolved_at=resolved)


def effective_schedule(job: Job, state: JobState) -> Schedule | None:
    """The job's schedule with the stored resolution applied (`in` time, `every` anchor)."""
    sched = job.schedule_obj
    if isinstance(sched, OneShotSchedule) and sched.at is None and state.resolved_at is not None:
        return OneShotSchedule(sched.text, state.resolved_at, sched.delay)
    if isinstance(sched, IntervalSchedule) and state.resolved_at is not None:
        return replace(sched, anchor=state.resolved_at)
    return sched


def first_slot(sched: Schedule, state: JobState) -> datetime | None:
    """The oldest slot not yet in the ledger."""
    if state.last_slot is not None:
        return sched.next_fire(state.last_slot, state.last_slot)
    if isinstance(sched, OneShotSchedule):
        return sched.at  # a one-shot already in the past is due (catch-up decides)
    assert state.first_seen is not None
    return sched.next_fire(None, state.first_seen)


def jitter_s(job: Job, slot: datetime) -> float:
    """The job's random delay for this slot: stable across restarts (seeded by job and slot)."""
    if job.spec.jitter <= 0:
        return 0.0
    return random.Random(f"{job.name}|{slot.isoformat()}").uniform(0.0, job.spec.jitter)


def fire_time(job: Job, slot: datetime) -> datetime:
    return slot + timedelta(seconds=jitter_s(job, slot))


def catchup_window(job: Job, sched: Schedule, now: datetime) -> float:
    """Seconds a missed slot stays eligible to run: ``catchup_window``, else one period
    clamped to [2 min, 24 h]; a one-shot's period counts as 24 h."""
    if job.spec.catchup_window is not None:
        return float(job.spec.catchup_window)
    period: float | None
    if isinstance(sched, IntervalSchedule):
        period = sched.seconds
    elif isinstance(sched, CronSchedule):
        period = sched.period(now)
    else:
        period = None
    return min(max(period or MAX_WINDOW_S, MIN_WINDOW_S), MAX_WINDOW_S)


def at_or_after(sched: Schedule, slot: datetime, t: datetime) -> datetime | None:
    """The first slot of ``sched`` at or after ``t``, given ``slot`` is one of its slots."""
    if slot >= t or isinstance(sched, OneShotSchedule):
        return slot
    if isinstance(sched, IntervalSchedule):
        steps = -(-(t - slot).total_seconds() // sched.seconds)
        return slot + timedelta(seconds=steps * sched.seconds)
    return sched.next_fire(None, t)


def upcoming(job: Job, state: JobState, now: datetime, count: int) -> list[datetime]:
    """The next ``count`` slots at or after ``now`` (what `jobs next` and `jobs list` show);
    a pending one-shot already in the past is shown as is."""
    if not state.seen(job):
        state = first_sight(job, now, state)
    sched = effective_schedule(job, state)
    if sched is None:
        return []
    slot = first_slot(sched, state)
    if slot is not None:
        slot = at_or_after(sched, slot, now)
    out: list[datetime] = []
    while slot is not None and len(out) < count:
        out.append(slot)
        slot = sched.next_fire(slot, slot)
    return out


def plan(job: Job, sched: Schedule, state: JobState, now: datetime, *, window: float, active: bool = True) -> Plan:
    """Decide what happens to every slot of ``job`` that is due at ``now``.

    ``active`` False (paused or disabled): due slots are consumed silently, nothing runs.
    """
    due: deque[datetime] = deque(maxlen=MAX_MISSED_ROWS)
    older = 0
    oldest: datetime | None = None
    slot = first_slot(sched, state)
    if isinstance(sched, IntervalSchedule) and slot is not None and slot < now:
        behind = int((now - slot).total_seconds() // sched.seconds) - MAX_MISSED_ROWS
        if behind > 0:  # count the oldest slots instead of walking them
            oldest, older = slot, behind
            slot = slot + timedelta(seconds=behind * sched.seconds)
    elif isinstance(sched, CronSchedule) and slot is not None and slot < now - LOOKBACK:
        oldest, older = slot, -1  # not enumerated: the count is unknown
        slot = at_or_after(sched, slot, now - LOOKBACK)
    while slot is not None and fire_time(job, slot) <= now:
        if len(due) == due.maxlen:
            if older >= 0:
                older += 1
            oldest = oldest or due[0]
        due.append(slot)
        slot = sched.next_fire(slot, slot)
    next_fire = fire_time(job, slot) if slot is not None else None
    if not due:
        return Plan(last_slot=state.last_slot, next_fire=next_fire)
    if not active:
        return Plan(consumed=len(due), last_slot=due[-1], next_fire=next_fire)
    late = {s: (now - fire_time(job, s)).total_seconds() for s in due}
    on_time = due[-1] if late[due[-1]] <= min(ON_TIME_S, window) else None
    in_window = [s for s in due if late[s] <= window]
    policy = job.spec.catchup
    runs: list[datetime]
    if policy == "skip":
        runs = [on_time] if on_time else []
    elif policy == "once":
        runs = [on_time] if on_time else in_window[-1:]
    else:
        runs = in_window[-MAX_CATCHUP_RUNS:]
    chosen = set(runs)
    missed = []
    for s in due:
        if s in chosen:
            continue
        if late[s] > window:
            reason = "outside_window"
        elif policy == "skip":
            reason = "catchup_skip"
        elif policy == "once":
            reason = "catchup_once"
        else:
            reason = "catchup_limit"
        missed.append((s, reason))
    note = None
    if oldest is not None:
        count = "more" if older < 0 else str(older)
        note = f"{count} earlier slots from {oldest.isoformat()} were also missed (not listed one by one)"
    return Plan(runs=tuple(runs), missed=tuple(missed), last_slot=due[-1], next_fire=next_fire, note=note)
