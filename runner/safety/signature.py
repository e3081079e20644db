"""HMAC signatures of inbound webhooks (``POST /hooks/JOB``), standard library only.

Two header forms are taken, both HMAC-SHA256 with the job's secret:

- GitHub's ``X-Hub-Signature-256: sha256=HEX`` over the raw body (no timestamp: a replay is caught
  by the delivery id, ``X-GitHub-Delivery``);
- runner's own ``X-Runner-Signature: t=UNIX,v1=HEX`` over ``f"{t}.".encode() + body`` (Stripe's
  form): ``t`` must be within the job's tolerance (5 minutes by default) of the receiver's clock,
  so a captured request cannot be replayed later; several ``v1=`` are allowed (a secret being
  rotated), one must match.

Every comparison is ``hmac.compare_digest``. ``verify`` says what is wrong in a few words (for the
log line and the metric), never why in a way that helps guess the secret.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from enum import StrEnum

GITHUB_HEADER = "x-hub-signature-256"
RUNNER_HEADER = "x-runner-signature"
_HEX64 = re.compile(r"^[0-9a-fA-F]{64}$")
_MAX_HEADER = 1024  # a longer signature header is malformed, not parsed


class Verdict(StrEnum):
    """What the signature check found (the ``outcome`` of a refused delivery)."""

    OK = "ok"
    MISSING = "unsigned"  # neither header
    MALFORMED = "malformed_signature"  # a header that is not in its form
    MISMATCH = "bad_signature"  # well formed, wrong
    STALE = "stale"  # X-Runner-Signature's t= outside the tolerance


@dataclass(frozen=True)
class RunnerSignature:
    """``X-Runner-Signature`` parsed: its timestamp and its ``v1`` digests (hex, lower case)."""

    timestamp: int
    digests: tuple[str, ...]


def hub_signature(secret: bytes, body: bytes) -> str:
    """The ``X-Hub-Signature-256`` value GitHub sends for ``body``."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def runner_signature(secret: bytes, body: bytes, timestamp: int) -> str:
    """The ``X-Runner-Signature`` value a sender writes for ``body`` at ``timestamp`` (Unix seconds)."""
    digest = hmac.new(secret, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def parse_runner_signature(header: str) -> RunnerSignature:
    """``t=UNIX,v1=HEX[,v1=HEX...]`` (spaces around items allowed, other keys ignored as Stripe
    does); ValueError when ``t`` is missing, repeated or not a non-negative integer, or when no
    ``v1`` is 64 hex digits."""
    if len(header) > _MAX_HEADER:
        raise ValueError("signature header too long")
    timestamp: int | None = None
    digests: list[str] = []
    for item in header.split(","):
        key, eq, value = item.strip().partition("=")
        if not eq:
            raise ValueError(f"item {item.strip()[:20]!r} is not KEY=VALUE")
        if key == "t":
            if timestamp is not None:
                raise ValueError("t= given twice")
            if not value.isascii() or not value.isdigit() or len(value) > 12:
                raise ValueError("t= is not Unix seconds")
            timestamp = int(value)
        elif key == "v1":
            if not _HEX64.match(value):
                raise ValueError("v1= is not 64 hex digits")
            digests.append(value.lower())
    if timestamp is None:
        raise ValueError("no t=")
    if not digests:
        raise ValueError("no v1=")
    return RunnerSignature(timestamp, tuple(digests))


def parse_hub_signature(header: str) -> str:
    """``sha256=HEX`` -> HEX (lower case); ValueError when it is not that form."""
    algo, eq, digest = header.strip().partition("=")
    if not eq or algo != "sha256" or not _HEX64.match(digest):
        raise ValueError("not sha256=HEX")
    return digest.lower()


def verify(secret: bytes, body: bytes, headers: dict[str, str], *, now: float, tolerance: float) -> Verdict:
    """Check ``body`` against the signature in ``headers`` (names lower case). GitHub's header
    is looked at first when both are present; each is checked in constant time."""
    hub = headers.get(GITHUB_HEADER)
    if hub is not None:
        try:
            given = parse_hub_signature(hub)
        except ValueError:
            return Verdict.MALFORMED
        expected = hmac.new(secret, body, hashlib.sha256).hexdigest()
        return Verdict.OK if hmac.compare_digest(given, expected) else Verdict.MISMATCH
    raw = headers.get(RUNNER_HEADER)
    if raw is None:
        return Verdict.MISSING
    try:
        sig = parse_runner_signature(raw)
    except ValueError:
        return Verdict.MALFORMED
    expected = hmac.new(secret, f"{sig.timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    matched = False
    for digest in sig.digests:  # all compared: the time taken does not say which one matched
        matched |= hmac.compare_digest(digest, expected)
    if not matched:
        return Verdict.MISMATCH
    if abs(now - sig.timestamp) > tolerance:
        return Verdict.STALE
    return Verdict.OK
