"""What an HTTP error means for the key that got it: the credential pool's cooldown rules.

A pure function of (status, headers, body, the key's row, the provider's ``cooldowns:``, now),
so every rule is testable without a clock or a server:

What the error means (``ErrorKind``) comes from the provider's profile (a Gemini 400
``API_KEY_INVALID`` is a bad key; an OpenRouter 403 for flagged input never reaches the pool):

- no credit (402, ``insufficient_quota``, "credit balance is too low"...): ``quota_s`` (24 h).
- a bad key (401 / 403): ``auth_s`` (5 min); failing auth again after that cooldown, with no success in
  between, marks the key ``dead`` until ``runner creds reset``. A second report that arrives
  while the key is still cooling for auth (another process's request in flight) changes nothing.
- a rate limit with ``Retry-After``, ``retry-after-ms``, a reset header (Go durations, epoch
  seconds or milliseconds, RFC 3339) or Gemini's ``retryDelay`` above zero: exactly that long.
- a rate limit without: the first of a streak retries the same key after ``rate_limit_retry_s``; the
  next cools it ``rate_limit_s`` (60 s), doubling for each further consecutive 429 up to
  ``rate_limit_max_s`` (1 h). A success ends the streak.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from runner.agent.profiles import PROFILES, ErrorKind, Family, error_kind, retry_after
from runner.store.keys import KeyRow, KeyStatus

if TYPE_CHECKING:
    from runner.config.machine import Cooldowns


@dataclass(frozen=True)
class KeyVerdict:
    kind: str  # quota | auth | auth_repeat | rate_limit | retry_same | other
    status: KeyStatus  # the key's new status
    seconds: float  # new cooldown from now; 0 = leave cooldown_until as it is
    auth_strikes: int
    rate_limit_strikes: int


def classify(
    status: int,
    headers: Mapping[str, str],
    body: str,
    row: KeyRow,
    rules: Cooldowns,
    now: float,
    *,
    kind: ErrorKind | None = None,
) -> KeyVerdict:
    """``kind``: what the provider's profile says the error means (runner/agent/profiles.py);
    without it, the status alone decides (401/403 auth, 402 quota, 429 rate limit)."""
    auth, strikes = row.auth_strikes, row.rate_limit_strikes
    until = datetime.fromisoformat(row.cooldown_until).timestamp() if row.cooldown_until else 0.0
    current = KeyStatus.DEAD if row.status is KeyStatus.DEAD else (KeyStatus.COOLING if until > now else KeyStatus.OK)
    if kind is None:
        kind = error_kind(PROFILES[Family.GENERIC], status, body)
    if kind is ErrorKind.NO_CREDIT:
        return KeyVerdict("quota", KeyStatus.COOLING, rules.quota_s, auth, strikes)
    if kind is ErrorKind.BAD_KEY:
        if current is KeyStatus.DEAD:
            return KeyVerdict("auth_repeat", KeyStatus.DEAD, 0.0, auth, strikes)
        if current is KeyStatus.COOLING and row.last_error_code in (401, 403, status):
            return KeyVerdict("auth_repeat", KeyStatus.COOLING, 0.0, auth, strikes)
        if auth >= 1:
            return KeyVerdict("auth", KeyStatus.DEAD, 0.0, auth + 1, strikes)
        return KeyVerdict("auth", KeyStatus.COOLING, rules.auth_s, 1, strikes)
    if kind is ErrorKind.RATE_LIMIT:
        wait = retry_after(headers, body, now)
        if wait is not None and wait > 0:
            return KeyVerdict("rate_limit", KeyStatus.COOLING, wait, auth, strikes + 1)
        if strikes == 0:
            return KeyVerdict("retry_same", current, 0.0, auth, 1)
        seconds = min(rules.rate_limit_max_s, rules.rate_limit_s * 2 ** (strikes - 1))
        return KeyVerdict("rate_limit", KeyStatus.COOLING, seconds, auth, strikes + 1)
    return KeyVerdict("other", current, 0.0, auth, strikes)
