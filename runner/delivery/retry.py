"""HTTP POST with retries: connection errors, 408, 429 (honouring Retry-After) and 5xx are tried
again after a doubling backoff; any other answer is final."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from runner.clock import utcnow
from runner.host.tls import verify_for

RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


class Policy(Protocol):
    @property
    def attempts(self) -> int: ...
    @property
    def backoff(self) -> float: ...
    @property
    def max_backoff(self) -> float: ...
    @property
    def timeout(self) -> float: ...


@dataclass(frozen=True)
class Posted:
    ok: bool
    status: int | None  # None: no HTTP answer
    attempts: int
    detail: str


def retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date); None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    from email.utils import parsedate_to_datetime  # ~5 ms of imports, only for an HTTP-date header

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - utcnow()).total_seconds())


def post(url: str, *, body: bytes, headers: Mapping[str, str], policy: Policy) -> Posted:
    """POST ``body`` to ``url`` up to ``policy.attempts`` times."""
    import httpx

    verify = verify_for(url)  # runner.host.tls: built once per process
    detail, status = "", None
    wait = policy.backoff
    for attempt in range(1, policy.attempts + 1):
        hint: float | None = None
        try:
            response = httpx.post(url, content=body, headers=dict(headers), timeout=policy.timeout, verify=verify)
        except httpx.HTTPError as exc:
            status, detail = None, f"{type(exc).__name__}: {exc}"
        else:
            status, detail = response.status_code, f"HTTP {response.status_code}"
            if 200 <= status < 300:
                return Posted(True, status, attempt, detail + (f" after {attempt} attempts" if attempt > 1 else ""))
            if status not in RETRY_STATUSES:
                return Posted(False, status, attempt, detail + _snippet(response.text))
            hint = retry_after(response.headers.get("retry-after"))
        if attempt == policy.attempts:
            break
        delay = min(policy.max_backoff, hint if hint is not None else wait)
        time.sleep(delay)
        wait = min(policy.max_backoff, wait * 2)
    return Posted(False, status, policy.attempts, f"{detail} (gave up after {policy.attempts} attempts)")


def _snippet(text: str) -> str:
    text = " ".join(text.split())[:200]
    return f": {text}" if text else ""
