"""Vixie cron expressions: fields, names, ranges, steps, macros and the day-of-month/day-of-week OR rule.

``parse_cron`` reads the text into a ``CronFields`` (the set of values of each field), and
``CronFields.next_match`` finds the next naive wall-clock minute that matches it (runner's own
matcher: no scheduler library is imported, so `runner jobs list` and serve's start stay cheap;
tests/config/test_cron.py checks it against croniter). When both day fields are restricted
(neither starts with ``*``) a day matches if either field matches (Vixie's rule).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property, lru_cache

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()  # names[i] is the value low + i (months) or i (days)
    names_from: int = 0


FIELDS = (
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day of month", 1, 31),
    _Field("month", 1, 12, tuple(MONTHS), 1),
    _Field("day of week", 0, 7, tuple(DAYS), 0),
)
_ITEM = re.compile(r"^(?:(\*)|([a-z0-9]+)(?:-([a-z0-9]+))?)(?:/(\d+))?$")


@dataclass(frozen=True)
class CronFields:
    """The expanded fields of one cron expression (day of week: 0 = Sunday, 7 folded into 0)."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    day_star: bool  # the day-of-month field starts with '*'
    weekday_star: bool
    hour_star: bool  # the hour field is exactly '*'

    def can_fire(self) -> bool:
        """Whether any date matches (without building a trigger). With the OR rule every week has a
        matching day; otherwise some chosen day must exist in some chosen month (29 February counts:
        within 28 years every date falls on every weekday)."""
        if not (self.day_star or self.weekday_star):
            return True
        return any(day <= MONTH_DAYS[month - 1] for month in self.months for day in self.days)

    def next_match(self, start: datetime) -> datetime | None:
        """First naive wall-clock minute at or after ``start`` (rounded up to a whole minute) that
        matches every field, or None when there is none within 400 years (the Gregorian calendar
        repeats every 400 years, so then there is none ever). Pure date arithmetic: no DST here."""
        at = start.replace(second=0, microsecond=0)
        if at < start:
            at += timedelta(minutes=1)
        limit = at.year + 400
        while at.year <= limit:
            if at.month not in self.months:
                at = datetime(at.year + at.month // 12, at.month % 12 + 1, 1)
            elif not self._day_matches(at):
                at = _next_day(at)
            elif at.hour not in self.hours:
                hour = _first_at_or_after(self._sorted[1], at.hour)
                at = at.replace(hour=hour, minute=0) if hour is not None else _next_day(at)
            else:
                minute = _first_at_or_after(self._sorted[0], at.minute)
                if minute is not None:
                    return at.replace(minute=minute)
                at = at.replace(minute=0) + timedelta(hours=1)
        return None

    @cached_property
    def _sorted(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return tuple(sorted(self.minutes)), tuple(sorted(self.hours))

    def _day_matches(self, at: datetime) -> bool:
        """Vixie's rule: when both day fields are restricted (neither starts with ``*``), either
        may match; otherwise both must (the unrestricted one matches every day anyway)."""
        in_month = at.day in self.days
        in_week = (at.isoweekday() % 7) in self.weekdays  # isoweekday: Monday 1 .. Sunday 7 -> 0
        if self.day_star or self.weekday_star:
            return in_month and in_week
        return in_month or in_week


def _first_at_or_after(values: tuple[int, ...], low: int) -> int | None:
    return next((v for v in values if v >= low), None)


def _next_day(at: datetime) -> datetime:
    return datetime(at.year, at.month, at.day) + timedelta(days=1)


def expand_macro(text: str) -> str:
    """The 5 fields a ``@macro`` stands for; other text unchanged. ``@reboot`` is refused."""
    raw = text.strip()
    if not raw.startswith("@"):
        return raw
    lowered = raw.lower()
    if lowered == "@reboot":
        raise ValueError(
            "@reboot is not supported: runner has no boot event (use 'in 1m' or run it from serve's start)"
        )
    if lowered not in MACROS:
        raise ValueError(f"unknown cron macro {raw!r} (use one of {', '.join(MACROS)})")
    return MACROS[lowered]


@lru_cache(maxsize=1024)
def parse_cron(text: str) -> CronFields:
    """Parse a 5-field cron (or a macro); raise ValueError naming the bad field. Cached: the jobs
    of a file that share an expression share its (immutable) fields, ~3 KB each."""
    fields = expand_macro(text).split()
    if len(fields) != 5:
        raise ValueError(f"a cron needs 5 fields (minute hour day-of-month month day-of-week), got {len(fields)}")
    values = [_parse_field(part, spec) for part, spec in zip(fields, FIELDS, strict=True)]
    weekdays = frozenset(0 if d == 7 else d for d in values[4])
    return CronFields(
        minutes=frozenset(values[0]),
        hours=frozenset(values[1]),
        days=frozenset(values[2]),
        months=frozenset(values[3]),
        weekdays=weekdays,
        day_star=fields[2].startswith("*"),
        weekday_star=fields[4].startswith("*"),
        hour_star=fields[1] == "*",
    )


def _parse_field(text: str, spec: _Field) -> set[int]:
    out: set[int] = set()
    for item in text.lower().split(","):
        out |= _parse_item(item, spec)
    return out


def _parse_item(item: str, spec: _Field) -> set[int]:
    match = _ITEM.match(item)
    if match is None:
        raise ValueError(f"{spec.name}: cannot read {item!r}")
    star, first, last, step_text = match.groups()
    step = int(step_text) if step_text else 1
    if step < 1:
        raise ValueError(f"{spec.name}: step must be at least 1 in {item!r}")
    if star:
        low, high = spec.low, spec.high
    else:
        low = _value(first, spec)
        # `N/step` runs from N to the field's end (as cronie and croniter read it)
        high = _value(last, spec) if last else (spec.high if step_text else low)
        if spec.names == tuple(DAYS) and last and high == 0 and low > 0:
            high = 7  # `fri-sun`: Sunday closes the range
        if high < low:
            raise ValueError(f"{spec.name}: range {item!r} runs backwards")
    return set(range(low, high + 1, step))


def _value(text: str, spec: _Field) -> int:
    if text.isdigit():
        value = int(text)
        if not spec.low <= value <= spec.high:
            raise ValueError(f"{spec.name}: {value} is out of range {spec.low}-{spec.high}")
        return value
    if text in spec.names:
        return spec.names.index(text) + spec.names_from
    raise ValueError(f"{spec.name}: unknown value {text!r}")
