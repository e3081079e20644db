from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.config.schedules import (
    CronSchedule,
    IntervalSchedule,
    OneShotSchedule,
    format_duration,
    parse_duration,
    parse_schedule,
    parse_timezone,
)

UTC_TZ = parse_timezone("UTC")
NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "text,seconds",
    [("30s", 30), ("20m", 1200), ("2h", 7200), ("1d", 86400), ("1h30m", 5400), ("45", 45), (90, 90), ("1w", 604800)],
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "10x", "m", "-5s", "1.5h", "h1", "5 minutes", True])
def test_bad_durations(text):
    with pytest.raises(ValueError):
        parse_duration(text)


@given(st.dictionaries(st.sampled_from("smhdw"), st.integers(0, 10_000), min_size=1))
def test_duration_roundtrip(parts):
    text = "".join(f"{n}{u}" for u, n in parts.items())
    mult = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    expected = sum(n * mult[u] for u, n in parts.items())
    assert parse_duration(text) == expected
    assert parse_duration(format_duration(expected)) == expected


@given(st.text(max_size=30))
def test_duration_never_crashes(text):
    try:
        value = parse_duration(text)
    except ValueError:
        return
    assert value >= 0


@given(st.text(max_size=40))
def test_schedule_parser_only_raises_valueerror(text):
    try:
        sched = parse_schedule(text, UTC_TZ, now=NOW)
    except ValueError as exc:
        assert str(exc)
        return
    assert sched.text


def test_schedule_kinds():
    assert isinstance(parse_schedule("0 2 * * *", UTC_TZ, now=NOW), CronSchedule)
    every = parse_schedule("every 30m", UTC_TZ)
    assert isinstance(every, IntervalSchedule) and every.seconds == 1800
    once = parse_schedule("in 2h", UTC_TZ)
    assert isinstance(once, OneShotSchedule) and once.next_fire(None, NOW) == NOW + timedelta(hours=2)
    iso = parse_schedule("2026-12-01T09:00", parse_timezone("Europe/Berlin"))
    assert iso.next_fire(None, NOW) == datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    assert iso.next_fire(iso.next_fire(None, NOW), NOW) is None


@pytest.mark.parametrize("text", ["0 0 31 2 *", "0 0 30 2 *"])
def test_cron_that_never_fires_is_rejected(text):
    with pytest.raises(ValueError, match="never fire"):
        parse_schedule(text, UTC_TZ, now=NOW)


@pytest.mark.parametrize("text", ["61 * * * *", "* * *", "every", "every 0s", "in soon", "2026-13-45T99:00"])
def test_bad_schedules(text):
    with pytest.raises(ValueError):
        parse_schedule(text, UTC_TZ, now=NOW)


def test_leap_day_cron():
    sched = parse_schedule("0 12 29 2 *", UTC_TZ, now=NOW)
    assert sched.next_fire(None, NOW) == datetime(2028, 2, 29, 12, 0, tzinfo=UTC)


def test_cron_next_is_strictly_after_prev():
    sched = parse_schedule("*/5 * * * *", UTC_TZ, now=NOW)
    first = sched.next_fire(None, NOW)
    assert first == NOW
    assert sched.next_fire(first, NOW) == NOW + timedelta(minutes=5)


def test_timezones():
    assert parse_timezone("Europe/Berlin").key == "Europe/Berlin"
    for bad in ["Mars/Olympus", "", "../etc/passwd", "UTC+5"]:
        with pytest.raises(ValueError):
            parse_timezone(bad)
