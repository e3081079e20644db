"""The cancel watcher (runner.run.cancel) on a real store, SQLite and PostgreSQL: one watcher
follows one run after another (serve's reusable worker keeps one for all its runs), each run's
cancel request sets that run's stop event and no other, a request written before the run was
followed is seen at the watcher's next look, and a watch of its own ends its thread with the run."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from runner.run.cancel import CancelWatch, CancelWatcher
from runner.statuses import RunStatus, Trigger
from runner.store import Store, ledger
from runner.store.control import request_cancel

CHECK = 0.02


@pytest.fixture
def store(where: Any) -> Iterator[Store]:
    s = Store.open(where)
    yield s
    s.close()


def running(store: Store, job: str) -> str:
    return ledger.open_run(store, job=job, trigger=Trigger.MANUAL, status=RunStatus.RUNNING)


def settles(event: threading.Event, seconds: float = 2.0) -> bool:
    return event.wait(seconds)


def test_one_watcher_follows_runs_one_after_another(store: Store) -> None:
    watcher = CancelWatcher(store.path, check=CHECK)
    try:
        first, second = running(store, "a"), running(store, "b")
        stop_a, stop_b = threading.Event(), threading.Event()
        watch_a = CancelWatch(watcher, first, stop_a).start()
        time.sleep(5 * CHECK)
        watch_a.close()
        request_cancel(store, first, by="alice")  # the first run is over: nobody is stopped
        watch_b = CancelWatch(watcher, second, stop_b).start()
        time.sleep(10 * CHECK)
        assert not stop_a.is_set() and not stop_b.is_set()
        request_cancel(store, second, by="bob")
        assert settles(stop_b), "the followed run's cancel was not seen"
        assert watch_b.by == "bob" and watch_a.by is None and not stop_a.is_set()
        watch_b.close()
        assert watcher._thread is not None and watcher._thread.is_alive()  # kept for the next run
    finally:
        watcher.close()
    assert watcher._thread is not None and not watcher._thread.is_alive()


def test_a_request_made_before_the_run_was_followed_is_seen_at_the_next_look(store: Store) -> None:
    watcher = CancelWatcher(store.path, check=CHECK)
    try:
        run_id = running(store, "b")
        idle = CancelWatch(watcher, running(store, "a"), threading.Event()).start()
        request_cancel(store, run_id, by="carol")  # b's request, while the watcher follows a
        time.sleep(10 * CHECK)  # the watcher has looked since: the store has not changed since then
        idle.close()
        stop = threading.Event()
        watch = CancelWatch(watcher, run_id, stop).start()
        assert settles(stop), "a request already in the store was not seen when the run started"
        assert watch.by == "carol" and idle.by is None
    finally:
        watcher.close()


def test_a_watch_of_its_own_ends_its_thread_with_the_run(store: Store) -> None:
    run_id = running(store, "a")
    stop = threading.Event()
    before = {t.ident for t in threading.enumerate()}
    watch = CancelWatch.alone(store.path, run_id, stop, check=CHECK).start()
    request_cancel(store, run_id, by="dave")
    assert settles(stop) and watch.by == "dave"
    watch.close()
    assert {t.ident for t in threading.enumerate() if t.name == "runner-cancel"} <= before


def test_a_watcher_whose_thread_the_store_ended_starts_again_with_the_next_run(tmp_path) -> None:
    """SQLite: the store's folder is missing while a run is followed (the thread cannot connect and
    ends); once the store is there, the next run followed gets a thread again and its cancel is seen."""
    path = tmp_path / "later" / "runner.db"
    watcher = CancelWatcher(path, check=CHECK)
    try:
        lost = CancelWatch(watcher, "20990101-000000-aaaaaa", threading.Event()).start()
        first = watcher._thread
        assert first is not None
        first.join(5)
        assert not first.is_alive()
        lost.close()
        path.parent.mkdir()
        store = Store.open(path)
        try:
            run_id = running(store, "b")
            request_cancel(store, run_id, by="erin")
            stop = threading.Event()
            watch = CancelWatch(watcher, run_id, stop).start()
            assert settles(stop) and watch.by == "erin"
            assert watcher._thread is not first
        finally:
            store.close()
    finally:
        watcher.close()
