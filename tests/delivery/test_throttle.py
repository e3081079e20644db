"""The alert throttle on a real store: the first alert of a streak, then every Nth or once
``min_interval`` has passed; a reset ends the streak."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from runner.delivery import throttle
from runner.store import Store

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_first_then_every_nth_then_interval(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "runner.db")
    sent = []
    for i in range(1, 8):
        d = throttle.record(
            store, "j", throttle.FAILURE, f"r{i}", every=3, min_interval=3600, now=T0 + timedelta(minutes=i)
        )
        sent.append((i, d.send, d.suppressed))
    assert [i for i, s, _ in sent if s] == [1, 3, 6]
    assert sent[2] == (3, True, 1) and sent[5] == (6, True, 2)
    late = throttle.record(store, "j", throttle.FAILURE, "r8", every=3, min_interval=3600, now=T0 + timedelta(hours=2))
    assert late.send and late.streak == 8 and late.suppressed == 1
    assert throttle.reset(store, "j", throttle.FAILURE) == 8
    assert throttle.reset(store, "j", throttle.FAILURE) == 0
    again = throttle.record(store, "j", throttle.FAILURE, "r9", every=3, min_interval=3600, now=T0 + timedelta(hours=2))
    assert again.send and again.streak == 1
    other = throttle.record(store, "k", throttle.FAILURE, "r1", every=3, min_interval=3600, now=T0)
    assert other.send and other.streak == 1  # per job


def test_one_run_counted_once(tmp_path: Path) -> None:
    """A run that stopped itself at its timeout and the serve that stopped it too both report its
    end: it is one event of the streak and at most one alert."""
    store = Store.open(tmp_path / "runner.db")
    first = throttle.record(store, "j", throttle.FAILURE, "r1", every=1, min_interval=0, now=T0)
    again = throttle.record(store, "j", throttle.FAILURE, "r1", every=1, min_interval=0, now=T0 + timedelta(seconds=1))
    assert first.send and not first.repeat
    assert again.repeat and not again.send and again.streak == 1
    nxt = throttle.record(store, "j", throttle.FAILURE, "r2", every=1, min_interval=0, now=T0 + timedelta(seconds=2))
    assert nxt.send and nxt.streak == 2


@settings(max_examples=30, deadline=None)
@given(every=st.integers(1, 6), gaps=st.lists(st.integers(0, 7200), min_size=1, max_size=25))
def test_throttle_properties(tmp_path_factory, every: int, gaps: list[int]) -> None:
    store = Store.open(tmp_path_factory.mktemp("t") / "runner.db")
    now, last_sent, held = T0, None, 0
    for n, gap in enumerate(gaps, start=1):
        now += timedelta(seconds=gap)
        d = throttle.record(store, "j", throttle.FAILURE, f"r{n}", every=every, min_interval=3600, now=now)
        expected = n == 1 or n % every == 0 or (last_sent is not None and (now - last_sent).total_seconds() >= 3600)
        assert d.send == expected and d.streak == n
        if d.send:
            assert d.suppressed == held
            last_sent, held = now, 0
        else:
            held += 1
            assert d.suppressed == held
