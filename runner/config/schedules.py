"""Durations (``30s``, ``20m``, ``1h30m``, ``1d``) and schedules (cron, ``every``, ``in``, ISO-8601).

Schedules are small objects with one pure method, ``next_fire(prev, now)``: the next fire
time strictly after ``prev`` (or at/after ``now`` when there is no previous fire), or None
when the schedule will never fire again. Time is always passed in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from functools import cached_property
from typing import Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from runner.config.cron import CronFields, parse_cron

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"^\s*(?:(\d+)\s*([smhdw]))+\s*$")
_PART = re.compile(r"(\d+)\s*([smhdw])")


def parse_duration(value: str | int | float) -> float:
    """Seconds in ``value``: a number (seconds) or ``30s``, ``20m``, ``2h``, ``1d``, ``1h30m``."""
    if isinstance(value, bool):
        raise ValueError("a duration must be a number of seconds or text like 30s, 20m, 2h, 1d")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"duration {value} is negative")
        return float(value)
    text = str(value).strip().lower()
    if text.isdigit():
        return float(text)
    if not _DURATION.match(text):
        raise ValueError(f"invalid duration {value!r} (use e.g. 30s, 20m, 2h, 1d, 1h30m)")
    return float(sum(int(n) * _UNITS[u] for n, u in _PART.findall(text)))


def parse_when(text: str, now: datetime, max_delay: float) -> datetime:
    """When ``text`` names, from ``now`` (aware): a duration (``2h``, ``30m``, ``1h30m``, seconds)
    or an ISO time (without an offset: UTC). ``ValueError`` (one line) unless it is after ``now``
    and at most ``max_delay`` seconds ahead."""
    raw = str(text).strip()
    if not raw:
        raise ValueError("'when' is empty: give a duration like 2h or 30m, or an ISO time")
    if raw[0].isdigit() and (raw.isdigit() or _DURATION.match(raw.lower())):
        seconds = parse_duration(raw)
        if seconds > max_delay:  # before the sum: a huge duration is past any date
            raise ValueError(f"'when' {raw[:60]!r} is more than {format_duration(max_delay)} ahead (followups.max_delay)")
        at = now + timedelta(seconds=seconds)
    else:
        try:
            at = datetime.fromisoformat(raw)
        except ValueError:
            raise ValueError(
                f"'when' {raw[:60]!r}: not a duration (2h, 30m, 1h30m) nor an ISO time (2030-01-31T09:00:00+00:00)"
            ) from None
        if at.tzinfo is None:
            at = at.replace(tzinfo=UTC)
    if at <= now:
        raise ValueError(f"'when' {raw[:60]!r} is not in the future")
    if (at - now).total_seconds() > max_delay:
        raise ValueError(f"'when' {raw[:60]!r} is more than {format_duration(max_delay)} ahead (followups.max_delay)")
    return at


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            n, seconds = divmod(seconds, size)
            parts.append(f"{n}{unit}")
    return "".join(parts)


def parse_timezone(name: str) -> ZoneInfo:
    try:
        if not name or name.startswith(("/", ".")) or ".." in name:
            raise ZoneInfoNotFoundError(name)
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown timezone {name!r} (use an IANA name like Europe/Berlin or UTC)") from exc


class Schedule(Protocol):
    @property
    def text(self) -> str: ...

    def next_fire(self, prev: datetime | None, now: datetime) -> datetime | None: ...


@dataclass(frozen=True)
class CronSchedule:
    """5-field cron (Vixie semantics, runner/config/cron.py) read in wall-clock time of ``tz``.

    DST: a wall time that does not exist (spring forward, 02:30 in America/New_York on
    2025-03-09) fires at the same distance past the gap, 03:30 local; a wall time that occurs
    twice (fall back) fires once, at its first occurrence, unless the hour field is ``*``
    (then every matching minute fires in both hours, so ``*/15 * * * *`` keeps its real-time
    rhythm). ``CronFields.next_match`` matches the fields on naive wall-clock times; the mapping
    to instants is done here.
    """

    text: str
    tz: tzinfo

    @cached_property
    def fields(self) -> CronFields:
        return parse_cron(self.text)

    def _next_wall(self, wall: datetime) -> datetime | None:
        """First naive wall-clock time >= ``wall`` matching the fields (no DST involved)."""
        return self.fields.next_match(wall)

    def _instants(self, wall: datetime) -> list[datetime]:
        first = wall.replace(tzinfo=self.tz, fold=0).astimezone(UTC)
        second = wall.replace(tzinfo=self.tz, fold=1).astimezone(UTC)
        if first == second or first.astimezone(self.tz).replace(tzinfo=None) != wall:
            return [first]  # an ordinary time, or a time in a gap (read with the offset before it)
        return [first, second] if self.fields.hour_star else [first]

    def _stable(self, at: datetime) -> bool:
        """No UTC-offset change within 3 h either side of ``at``."""
        span = timedelta(hours=3)
        return (at - span).astimezone(self.tz).utcoffset() == (at + span).astimezone(self.tz).utcoffset()

    def first_at_or_after(self, start: datetime) -> datetime | None:
        wall = start.astimezone(self.tz).replace(tzinfo=None)
        cand = self._next_wall(wall)
        if cand is None:
            return None
        fast = self._instants(cand)[0]
        if fast >= start and self._stable(start) and self._stable(fast):
            return fast
        # Near a DST change: look at every candidate from 3 h before, keep the earliest instant.
        span = timedelta(hours=3)
        best: datetime | None = None
        probe = self._next_wall(wall - span)
        while probe is not None:
            for at in self._instants(probe):
                if at >= start and (best is None or at < best):
                    best = at
            limit = best.astimezone(self.tz).replace(tzinfo=None) + span if best is not None else None
            if limit is not None and probe > limit:
                break
            probe = self._next_wall(probe + timedelta(seconds=1))
        return best

    def next_fire(self, prev: datetime | None, now: datetime) -> datetime | None:
        start = now if prev is None else max(prev + timedelta(seconds=1), now)
        return self.first_at_or_after(start)

    def period(self, now: datetime) -> float | None:
        first = self.next_fire(None, now)
        if first is None:
            return None
        second = self.next_fire(first, first)
        return (second - first).total_seconds() if second else None


@dataclass(frozen=True)
class IntervalSchedule:
    text: str
    seconds: float
    anchor: datetime | None = None  # first fire; default: now when first seen

    def next_fire(self, prev: datetime | None, now: datetime) -> datetime | None:
        if prev is None:
            return self.anchor or now
        nxt = prev + timedelta(seconds=self.seconds)
        return nxt


@dataclass(frozen=True)
class OneShotSchedule:
    text: str
    at: datetime | None  # None for "in 2h" until serve resolves it
    delay: float | None = None

    def resolved(self, first_seen: datetime) -> OneShotSchedule:
        if self.at is not None:
            return self
        return OneShotSchedule(self.text, first_seen + timedelta(seconds=self.delay or 0), self.delay)

    def next_fire(self, prev: datetime | None, now: datetime) -> datetime | None:
        if prev is not None:
            return None
        return self.at if self.at is not None else now + timedelta(seconds=self.delay or 0)


def parse_schedule(text: str, tz: tzinfo, *, now: datetime | None = None) -> Schedule:
    """Parse a jobs.yaml ``schedule:`` value; raise ValueError with a clear message."""
    raw = str(text).strip()
    lowered = raw.lower()
    if lowered.startswith("every "):
        seconds = parse_duration(lowered[6:])
        if seconds < 1:
            raise ValueError("an interval must be at least 1s")
        return IntervalSchedule(raw, seconds)
    if lowered.startswith("in "):
        return OneShotSchedule(raw, None, parse_duration(lowered[3:]))
    if len(raw.split()) == 5 or raw.startswith("@"):
        return _parse_cron(raw, tz)
    if re.match(r"^\d{4}-\d{2}-\d{2}", raw):
        try:
            at = datetime.fromisoformat(raw)
        except ValueError as exc:
            raise ValueError(f"invalid ISO-8601 time {raw!r}") from exc
        if at.tzinfo is None:
            at = at.replace(tzinfo=tz)
        return OneShotSchedule(raw, at)
    raise ValueError(
        f"invalid schedule {raw!r}: use a 5-field cron ('0 2 * * *') or @daily, 'every 30m', 'in 2h' "
        "or an ISO-8601 time ('2026-12-01T09:00')"
    )


def _parse_cron(raw: str, tz: tzinfo) -> CronSchedule:
    try:
        fields = parse_cron(raw)
    except ValueError as exc:
        raise ValueError(f"invalid cron {raw!r}: {exc}") from exc
    if not fields.can_fire():
        raise ValueError(f"cron {raw!r} can never fire")
    schedule = CronSchedule(raw, tz)
    schedule.__dict__["fields"] = fields  # parsed once
    return schedule
