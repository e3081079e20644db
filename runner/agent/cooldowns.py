"""What an HTTP error means for the key that got it: the credential pool's cooldown rules.

A pure function of (status, headers, body, the key's row, the provider's ``cooldowns:``, now),
so every rule is testable without a clock or a server:

- 402, or ``insufficient_quota`` in the body (some providers send it with 429): ``quota_s`` (24 h).
- 401 / 403: ``auth_s`` (5 min); failing auth again after that cooldown, with no success in
  between, marks the key ``dead`` until ``runner creds reset``. A second report that arrives
  while the key is still cooling for auth (another process's request in flight) changes nothing.
- 429 with ``Retry-After``, ``retry-after-ms`` or ``x-ratelimit-reset-*`` above zero: exactly that long.
- 429 without: the first of a streak retries the same key after ``rate_limit_retry_s``; the
  next cools it ``rate_limit_s`` (60 s), doubling for each further consecutive 429 up to
  ``rate_limit_max_s`` (1 h). A success ends the streak.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runner.config.machine import Cooldowns


@dataclass(frozen=True)
class KeyVerdict:
    kind: str  # quota | auth | auth_repeat | rate_limit | retry_same | other
    status: str  # the key's new status: ok | cooling | dead
    seconds: float  # new cooldown from now; 0 = leave cooldown_until as it is
    auth_strikes: int
    rate_limit_strikes: int


def classify(
    status: int, headers: Mapping[str, str], body: str, row: Mapping[str, Any], rules: Cooldowns, now: float
) -> KeyVerdict:
    auth, strikes = int(row["auth_strikes"] or 0), int(row["rate_limit_strikes"] or 0)
    until = datetime.fromisoformat(row["cooldown_until"]).timestamp() if row["cooldown_until"] else 0.0
    current = row["status"] if row["status"] == "dead" else ("cooling" if until > now else "ok")
    if status == 402 or "insufficient_quota" in body:
        return KeyVerdict("quota", "cooling", rules.quota_s, auth, strikes)
    if status in (401, 403):
        if current == "dead":
            return KeyVerdict("auth_repeat", "dead", 0.0, auth, strikes)
        if current == "cooling" and row["last_error_code"] in (401, 403):
            return KeyVerdict("auth_repeat", "cooling", 0.0, auth, strikes)
        if auth >= 1:
            return KeyVerdict("auth", "dead", 0.0, auth + 1, strikes)
        return KeyVerdict("auth", "cooling", rules.auth_s, 1, strikes)
    if status == 429:
        from runner.agent.llm import retry_after_seconds

        wait = retry_after_seconds(headers)
        if wait is not None and wait > 0:
            return KeyVerdict("rate_limit", "cooling", wait, auth, strikes + 1)
        if strikes == 0:
            return KeyVerdict("retry_same", current, 0.0, auth, 1)
        seconds = min(rules.rate_limit_max_s, rules.rate_limit_s * 2 ** (strikes - 1))
        return KeyVerdict("rate_limit", "cooling", seconds, auth, strikes + 1)
    return KeyVerdict("other", current, 0.0, auth, strikes)
