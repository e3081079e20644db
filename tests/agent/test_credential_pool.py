"""The credential pool as an API: real SQLite files, an injected clock, no server.

Hours of cooldown are simulated by moving the clock; sleeps advance it instead of waiting."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from runner.agent.cooldowns import classify
from runner.agent.credentials import CredentialPool, list_credentials, reset
from runner.agent.keys import Action, Credential
from runner.config.machine import Cooldowns
from runner.errors import ModelError
from runner.events import encode
from runner.store import Store
from runner.store.keys import KeyRow, KeyStatus

CREDS = [Credential(f"K{i}", f"value-{i}-abcdefghijklmnop") for i in range(3)]


class Clock:
    def __init__(self, start: float = 1_800_000_000.0):
        self.now = start
        self.mono = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.mono

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        self.mono += seconds


def pool(store, clock, creds=CREDS, **kw):
    events: list[tuple[str, dict]] = []
    p = CredentialPool(
        store,
        "p",
        creds,
        clock=clock,
        monotonic=clock.monotonic,
        sleep=clock.sleep,
        emit=lambda k, v: events.append((k, encode(v))),
        **kw,
    )
    p.events = events  # type: ignore[attr-defined]
    return p


@pytest.fixture
def store(where):
    s = Store.open(where)  # SQLite and PostgreSQL
    yield s
    s.close()


def state(store, clock):
    return {r.label: r for r in list_credentials(store, now=clock())}


def test_least_used_over_90_runs_from_three_connections_is_even(tmp_path):
    """Three threads, each with its own SQLite connection to one file: 30 runs each, one request per run."""
    path = tmp_path / "runner.db"
    Store.open(path).close()
    errors: list[BaseException] = []

    def worker() -> None:
        s = Store.open(path)
        try:
            for _ in range(30):
                p = CredentialPool(s, "p", CREDS, strategy="least_used")
                cred = p.current()
                p.succeeded(cred)
        except BaseException as exc:  # reported to the main thread below
            errors.append(exc)
        finally:
            s.close()

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    store = Store.open(path)
    counts = {r.label: r.request_count for r in list_credentials(store)}
    assert sum(counts.values()) == 90
    assert all(27 <= n <= 33 for n in counts.values()), counts


def test_strategies_pick_as_documented(store):
    clock = Clock()
    firsts = Counter(pool(store, clock).current().label for _ in range(6))
    assert firsts == {"K0": 6}
    order = []
    for _ in range(6):
        p = pool(store, clock, strategy="round_robin")
        order.append(p.current().label)
        clock.now += 1
    assert order == ["K1", "K2", "K0", "K1", "K2", "K0"]  # K0 was picked last (by fill_first above)
    import random

    rng = random.Random(7)
    picks = Counter(pool(store, clock, strategy="random", rng=rng).current().label for _ in range(60))
    assert set(picks) == {"K0", "K1", "K2"}


def test_sticky_until_the_key_fails_then_rotates(store):
    clock = Clock()
    p = pool(store, clock, strategy="round_robin")
    assert {p.current().label for _ in range(5)} == {"K0"}
    assert p.failed(CREDS[0], 429, {"Retry-After": "10"}, "") is Action.ROTATE
    assert p.current().label == "K1"
    clock.now += 11
    assert p.current().label == "K1"  # still sticky after K0 recovers
    kinds = [k for k, _ in p.events]
    assert kinds == ["credential_selected", "credential_cooldown", "credential_rotated"]


def test_cooldown_set_by_another_pool_is_honoured_mid_run(store):
    clock = Clock()
    a, b = pool(store, clock), pool(store, clock)
    assert a.current().label == b.current().label == "K0"
    a.failed(CREDS[0], 429, {"x-ratelimit-reset-requests": "20s"}, "")
    assert b.current().label == "K1"
    assert state(store, clock)["K0"].cooldown_left_s == 20


def test_headerless_429_retries_once_then_60s_doubling_to_an_hour(store):
    clock = Clock()
    p = pool(store, clock, creds=CREDS[:1], max_wait=0)
    p.current()
    assert p.failed(CREDS[0], 429, {}, "") is Action.ROTATE
    assert clock.slept == [1.0] and state(store, clock)["K0"].status == "ok"
    cools = []
    for _ in range(9):
        p.failed(CREDS[0], 429, {}, "")
        cools.append(state(store, clock)["K0"].cooldown_left_s)
        clock.now += cools[-1]
    assert cools == [60, 120, 240, 480, 960, 1920, 3600, 3600, 3600]
    p.succeeded(CREDS[0])
    p.failed(CREDS[0], 429, {}, "")
    assert state(store, clock)["K0"].status == "ok"  # a success ended the streak: one quick retry again


def test_quota_is_24h_even_when_sent_as_429(store):
    clock = Clock()
    p = pool(store, clock, max_wait=0)
    p.current()
    p.failed(CREDS[0], 429, {"Retry-After": "5"}, '{"error": {"code": "insufficient_quota"}}')
    p.failed(CREDS[1], 402, {}, "payment required")
    rows = state(store, clock)
    assert rows["K0"].cooldown_left_s == rows["K1"].cooldown_left_s == 86400


def test_auth_cools_5_min_then_dead_on_repeat_and_all_dead_fails_at_once(store):
    clock = Clock()
    p = pool(store, clock, creds=CREDS[:2])
    for cred in CREDS[:2]:
        p.failed(cred, 401, {}, "bad key")
        p.failed(cred, 401, {}, "bad key")  # a second report during the cooldown (a request in flight): no change
    assert {r.status for r in state(store, clock).values()} == {"cooling"}
    assert state(store, clock)["K0"].cooldown_left_s == 300
    clock.now += 301
    p.failed(CREDS[0], 403, {}, "forbidden")
    p.failed(CREDS[1], 401, {}, "bad key")
    assert {r.status for r in state(store, clock).values()} == {"dead"}
    with pytest.raises(ModelError) as exc:
        p.current()
    assert exc.value.reason == "credentials_dead"
    assert all(c.fingerprint in str(exc.value) for c in CREDS[:2])
    assert clock.slept == []
    assert reset(store, provider="p") == 2
    assert p.current().label == "K0"


def test_waits_for_the_soonest_key_within_max_wait_else_exhausted(store):
    clock = Clock()
    p = pool(store, clock, creds=CREDS[:2], max_wait=30)
    p.failed(CREDS[0], 429, {"Retry-After": "50"}, "")
    p.failed(CREDS[1], 429, {"Retry-After": "10"}, "")
    assert p.current().label == "K1" and clock.slept == [10]
    p.failed(CREDS[1], 429, {"Retry-After": "25"}, "")
    with pytest.raises(ModelError) as exc:  # 10 s already waited: 25 more would pass max_wait
        p.current()
    assert exc.value.reason == "credentials_exhausted" and "max_wait" in str(exc.value)
    p.attach(deadline=clock.monotonic() + 5)
    p.succeeded(CREDS[1])
    with pytest.raises(ModelError) as exc:
        p.current()
    assert "remaining time" in str(exc.value) and "frees at" in str(exc.value)


def test_a_provider_with_a_fallback_after_it_does_not_wait(store):
    clock = Clock()
    p = pool(store, clock, creds=CREDS[:1], may_wait=False)
    p.failed(CREDS[0], 429, {"Retry-After": "2"}, "")
    with pytest.raises(ModelError, match="fallback"):
        p.current()
    assert clock.slept == []


def test_classify_retry_after_is_exact():
    row = KeyRow("p", "fp", "k1", 0, KeyStatus.OK, None, 0, 0, None, None, None, None, 3, 0)
    v = classify(429, {"retry-after-ms": "1500"}, "", row, Cooldowns(), 0.0)
    assert (v.kind, v.seconds, v.rate_limit_strikes) == ("rate_limit", 1.5, 4)
    assert classify(500, {}, "", row, Cooldowns(), 0.0).kind == "other"


def test_no_raw_key_stored(store, tmp_path):
    clock = Clock()
    p = pool(store, clock)
    p.current()
    p.failed(CREDS[0], 401, {}, f"Incorrect API key provided: {CREDS[0].value}")
    if store.dialect == "sqlite":
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        blob = (tmp_path / "runner.db").read_bytes()
    else:  # PostgreSQL: every credentials row as text
        blob = repr(store.query("SELECT * FROM credentials")).encode()
    assert CREDS[0].value.encode() not in blob and CREDS[0].fingerprint.encode() in blob
    assert "[REDACTED]" in (state(store, clock)["K0"].last_error_message or "")
