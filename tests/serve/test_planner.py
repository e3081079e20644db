"""The scheduler's pure planning (runner/serve/planner.py) with injected times: DST, leap days,
catch-up decisions, first sight of `in` / `every`, jitter, pauses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from runner.config.jobs import Job, JobSpec
from runner.config.schedules import parse_schedule, parse_timezone
from runner.serve.planner import (
    MAX_CATCHUP_RUNS,
    MAX_MISSED_ROWS,
    JobState,
    catchup_window,
    effective_schedule,
    fire_time,
    first_sight,
    jitter_s,
    plan,
    upcoming,
)

NY = ZoneInfo("America/New_York")


def make_job(schedule: str, tz: str = "UTC", **spec: Any) -> Job:
    js = JobSpec(schedule=schedule, timezone=tz, agent=False, pre_run="true", **spec)
    return Job("j", js, Path("/tmp"), tz, parse_schedule(schedule, parse_timezone(tz)))


def fires(job: Job, start: datetime, n: int) -> list[datetime]:
    state = first_sight(job, start)
    return upcoming(job, state, start, n)


def local(at: datetime) -> str:
    return at.astimezone(NY).strftime("%m-%d %H:%M%z")


def test_dst_spring_forward_0230_fires_at_0330_edt():
    job = make_job("30 2 * * *", "America/New_York")
    got = fires(job, datetime(2025, 3, 8, tzinfo=UTC), 3)
    assert [local(f) for f in got] == ["03-08 02:30-0500", "03-09 03:30-0400", "03-10 02:30-0400"]
    assert got[1] == datetime(2025, 3, 9, 7, 30, tzinfo=UTC)


def test_dst_fall_back_0230_fires_once():
    job = make_job("30 2 * * *", "America/New_York")
    got = fires(job, datetime(2025, 11, 1, tzinfo=UTC), 3)
    assert [local(f) for f in got] == ["11-01 02:30-0400", "11-02 02:30-0500", "11-03 02:30-0500"]
    assert [(b - a) for a, b in zip(got, got[1:], strict=False)] == [timedelta(hours=25), timedelta(hours=24)]


def test_dst_fall_back_repeated_hour():
    once = make_job("30 1 * * *", "America/New_York")  # 01:30 happens twice: fires at the first
    got = fires(once, datetime(2025, 11, 2, tzinfo=UTC), 2)
    assert [local(f) for f in got] == ["11-02 01:30-0400", "11-03 01:30-0500"]
    every = make_job("*/30 * * * *", "America/New_York")  # hour `*`: both hours, 30 real minutes apart
    got = fires(every, datetime(2025, 11, 2, 4, 50, tzinfo=UTC), 6)
    assert all(b - a == timedelta(minutes=30) for a, b in zip(got, got[1:], strict=False))
    assert [local(f) for f in got][:4] == [
        "11-02 01:00-0400",
        "11-02 01:30-0400",
        "11-02 01:00-0500",
        "11-02 01:30-0500",
    ]


def test_dst_hourly_cron_has_no_duplicate_on_spring_forward():
    job = make_job("0 * * * *", "America/New_York")
    got = fires(job, datetime(2025, 3, 9, 5, 30, tzinfo=UTC), 4)
    assert [local(f) for f in got] == ["03-09 01:00-0500", "03-09 03:00-0400", "03-09 04:00-0400", "03-09 05:00-0400"]


def test_dst_catchup_across_the_gap():
    """serve down over the spring-forward night: the 02:30 slot (03:30 EDT) runs on return."""
    job = make_job("30 2 * * *", "America/New_York", catchup="once")
    sched = job.schedule_obj
    state = JobState(
        "j",
        job.spec.schedule,
        first_seen=datetime(2025, 3, 1, tzinfo=UTC),
        last_slot=datetime(2025, 3, 8, 7, 30, tzinfo=UTC),
    )
    now = datetime(2025, 3, 9, 8, 0, tzinfo=UTC)
    decision = plan(job, sched, state, now, window=catchup_window(job, sched, now))
    assert decision.runs == (datetime(2025, 3, 9, 7, 30, tzinfo=UTC),) and not decision.missed
    assert decision.next_fire == datetime(2025, 3, 10, 6, 30, tzinfo=UTC)


def test_leap_day_cron():
    job = make_job("0 12 29 2 *")
    assert fires(job, datetime(2025, 3, 1, tzinfo=UTC), 2) == [
        datetime(2028, 2, 29, 12, tzinfo=UTC),
        datetime(2032, 2, 29, 12, tzinfo=UTC),
    ]


NOW = datetime(2025, 6, 1, 12, 5, tzinfo=UTC)


def _gap_plan(policy: str, window: str | None = None) -> Any:
    spec: dict[str, Any] = {"catchup": policy}
    if window:
        spec["catchup_window"] = window
    job = make_job("*/15 * * * *", **spec)
    state = JobState(
        "j", job.spec.schedule, first_seen=NOW - timedelta(days=1), last_slot=datetime(2025, 6, 1, 9, tzinfo=UTC)
    )
    return plan(job, job.schedule_obj, state, NOW, window=catchup_window(job, job.schedule_obj, NOW))


def test_catchup_policies_after_3h_gap():
    skip, once, every = _gap_plan("skip"), _gap_plan("once"), _gap_plan("all", "1h")
    assert (len(skip.runs), len(skip.missed)) == (0, 12)
    assert (len(once.runs), len(once.missed)) == (1, 11)
    assert once.runs == (datetime(2025, 6, 1, 12, 0, tzinfo=UTC),)
    assert (len(every.runs), len(every.missed)) == (4, 8)
    assert every.runs[0] == datetime(2025, 6, 1, 11, 15, tzinfo=UTC)
    assert {r for _, r in every.missed} == {"outside_window"}
    for p in (skip, once, every):
        assert p.last_slot == datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
        assert p.next_fire == datetime(2025, 6, 1, 12, 15, tzinfo=UTC)


def test_on_time_slot_runs_under_every_policy():
    for policy in ("skip", "once", "all"):
        job = make_job("every 10s", catchup=policy)
        state = first_sight(job, NOW)
        slot = state.resolved_at
        decision = plan(job, effective_schedule(job, state), state, slot + timedelta(seconds=2), window=120)
        assert decision.runs == (slot,) and not decision.missed


def test_catchup_all_is_capped_and_long_gaps_are_summarised():
    job = make_job("every 1m", catchup="all", catchup_window="1d")
    state = JobState(
        "j",
        "every 1m",
        first_seen=NOW - timedelta(days=30),
        last_slot=NOW - timedelta(days=20),
        resolved_at=NOW - timedelta(days=30),
    )
    decision = plan(job, effective_schedule(job, state), state, NOW, window=86400)
    assert len(decision.runs) == MAX_CATCHUP_RUNS
    assert len(decision.runs) + len(decision.missed) == MAX_MISSED_ROWS
    assert decision.note and "earlier slots" in decision.note
    assert decision.runs[-1] == NOW


def test_default_window_is_one_period_clamped():
    assert catchup_window(make_job("every 30s"), make_job("every 30s").schedule_obj, NOW) == 120
    assert catchup_window(make_job("every 1h"), make_job("every 1h").schedule_obj, NOW) == 3600
    weekly = make_job("0 0 * * 1")
    assert catchup_window(weekly, weekly.schedule_obj, NOW) == 86400
    once = make_job("2025-06-01T11:00")
    assert catchup_window(once, once.schedule_obj, NOW) == 86400


def test_in_and_every_are_resolved_at_first_sight():
    job = make_job("in 2h")
    state = first_sight(job, NOW)
    assert state.resolved_at == NOW + timedelta(hours=2)
    later = NOW + timedelta(minutes=30)
    assert upcoming(job, state, later, 3) == [NOW + timedelta(hours=2)]  # not pushed back
    assert upcoming(job, JobState("j"), later, 1) == [later + timedelta(hours=2)]  # never seen: from now
    interval = make_job("every 10m")
    st = first_sight(interval, NOW)
    assert upcoming(interval, st, NOW + timedelta(minutes=25), 2) == [
        NOW + timedelta(minutes=30),
        NOW + timedelta(minutes=40),
    ]


def test_iso_one_shot_due_while_down_runs_once_then_never():
    job = make_job("2025-06-01T11:00")
    state = JobState("j", job.spec.schedule, first_seen=NOW - timedelta(days=1))
    decision = plan(job, job.schedule_obj, state, NOW, window=86400)
    assert decision.runs == (datetime(2025, 6, 1, 11, tzinfo=UTC),) and decision.next_fire is None
    after = JobState("j", job.spec.schedule, first_seen=state.first_seen, last_slot=decision.last_slot)
    assert plan(job, job.schedule_obj, after, NOW, window=86400).runs == ()


def test_jitter_is_stable_and_bounded():
    job = make_job("every 1m", jitter="30s")
    slot = NOW
    assert jitter_s(job, slot) == jitter_s(job, slot)
    values = {jitter_s(job, slot + timedelta(minutes=i)) for i in range(50)}
    assert len(values) > 40 and all(0 <= v <= 30 for v in values)
    assert fire_time(job, slot) == slot + timedelta(seconds=jitter_s(job, slot))
    assert jitter_s(make_job("every 1m"), slot) == 0


@pytest.mark.parametrize("paused,enabled", [(True, True), (False, False)])
def test_paused_or_disabled_slots_pass_silently(paused, enabled):
    job = make_job("every 1m", enabled=enabled)
    state = JobState(
        "j", "every 1m", first_seen=NOW - timedelta(hours=1), last_slot=NOW - timedelta(minutes=10), paused=paused
    )
    decision = plan(job, job.schedule_obj, state, NOW, window=120, active=not paused and enabled)
    assert decision.runs == () and decision.missed == () and decision.consumed == 10
    assert decision.last_slot == NOW
