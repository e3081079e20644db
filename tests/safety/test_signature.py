"""Webhook signatures (runner.safety.signature): GitHub's documented example, runner's own form,
and the header parser under hypothesis (it never raises anything but ValueError)."""

from __future__ import annotations

import hmac

from hypothesis import given
from hypothesis import strategies as st

from runner.safety.signature import (
    Verdict,
    hub_signature,
    parse_hub_signature,
    parse_runner_signature,
    runner_signature,
    verify,
)

# GitHub docs, "Validating webhook deliveries": this secret and payload give this signature
GITHUB_SECRET = b"It's a Secret to Everybody"
GITHUB_PAYLOAD = b"Hello, World!"
GITHUB_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


def test_githubs_documented_example() -> None:
    assert hub_signature(GITHUB_SECRET, GITHUB_PAYLOAD) == GITHUB_SIGNATURE
    headers = {"x-hub-signature-256": GITHUB_SIGNATURE}
    assert verify(GITHUB_SECRET, GITHUB_PAYLOAD, headers, now=0, tolerance=300) == Verdict.OK
    assert verify(GITHUB_SECRET, GITHUB_PAYLOAD + b" ", headers, now=0, tolerance=300) == Verdict.MISMATCH
    assert verify(b"another secret", GITHUB_PAYLOAD, headers, now=0, tolerance=300) == Verdict.MISMATCH
    upper = {"x-hub-signature-256": GITHUB_SIGNATURE.upper().replace("SHA256", "sha256")}
    assert verify(GITHUB_SECRET, GITHUB_PAYLOAD, upper, now=0, tolerance=300) == Verdict.OK


def test_runner_form_and_its_tolerance() -> None:
    header = runner_signature(b"s", b"body", 1_000_000)
    ok = {"x-runner-signature": header}
    assert verify(b"s", b"body", ok, now=1_000_100, tolerance=300) == Verdict.OK
    assert verify(b"s", b"body", ok, now=1_000_301, tolerance=300) == Verdict.STALE
    assert verify(b"s", b"body", ok, now=999_600, tolerance=300) == Verdict.STALE
    assert verify(b"s", b"bodY", ok, now=1_000_000, tolerance=300) == Verdict.MISMATCH
    # a wrong signature is a mismatch even when stale: the timestamp says nothing to an unsigned sender
    assert verify(b"x", b"body", ok, now=0, tolerance=300) == Verdict.MISMATCH
    rotated = {"x-runner-signature": f"{header},v1={'0' * 64}"}
    assert verify(b"s", b"body", rotated, now=1_000_000, tolerance=300) == Verdict.OK
    assert verify(b"s", b"body", {}, now=0, tolerance=300) == Verdict.MISSING
    for bad in ("", "t=1", "v1=" + "a" * 64, "t=x,v1=" + "a" * 64, "t=1,t=2,v1=" + "a" * 64, "t=1,v1=abc", "junk"):
        assert verify(b"s", b"body", {"x-runner-signature": bad}, now=0, tolerance=300) == Verdict.MALFORMED, bad
    for bad in ("sha1=" + "a" * 40, "sha256=", "sha256=" + "g" * 64, GITHUB_SIGNATURE[7:]):
        assert verify(b"s", b"b", {"x-hub-signature-256": bad}, now=0, tolerance=300) == Verdict.MALFORMED, bad


@given(st.text(max_size=300))
def test_runner_header_parser_takes_or_refuses_anything(text: str) -> None:
    try:
        sig = parse_runner_signature(text)
    except ValueError:
        return
    assert sig.timestamp >= 0 and sig.digests
    assert all(len(d) == 64 and d == d.lower() for d in sig.digests)


@given(st.text(max_size=100))
def test_hub_header_parser_takes_or_refuses_anything(text: str) -> None:
    try:
        digest = parse_hub_signature(text)
    except ValueError:
        return
    assert len(digest) == 64


@given(st.binary(max_size=200), st.binary(min_size=1, max_size=40), st.integers(0, 10**12 - 1))
def test_what_a_sender_signs_verifies(body: bytes, secret: bytes, t: int) -> None:
    header = runner_signature(secret, body, t)
    assert parse_runner_signature(header).timestamp == t
    assert verify(secret, body, {"x-runner-signature": header}, now=t, tolerance=1) == Verdict.OK
    assert hmac.compare_digest(hub_signature(secret, body)[7:], parse_hub_signature(hub_signature(secret, body)))
