"""serve's schedule ticker and pool in process, ticked with an injected clock: no sleeps, no
timing windows. Real Settings, real SQLite, the real ticker and pool; only the process launch
is replaced (a ``Spawner`` whose workers end when the test says so, writing their final status
through the real ledger code, as a worker does). test_daemon.py / test_runs.py keep the same
behaviour covered end to end with real processes."""

from __future__ import annotations

import logging
import os
import signal
import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

import pytest

from runner.serve.fire import Paths
from runner.serve.launcher import WorkerSpec
from runner.serve.pool import Pool
from runner.serve.schedule import ScheduleTicker
from runner.settings import Settings
from runner.store import Store, iso, ledger

T0 = datetime(2025, 6, 2, 12, 0, 30, tzinfo=UTC)  # 30 s past a slot of every 5-minute job
EVERY_5 = '    schedule: "*/5 * * * *"\n    agent: false\n    pre_run: "true"\n'


def at(hh_mm: str, seconds: float = 0.0) -> datetime:
    hour, minute = (int(x) for x in hh_mm.split(":"))
    return datetime(2025, 6, 2, hour, minute, tzinfo=UTC) + timedelta(seconds=seconds)


class ManualClock:
    """serve's ``Clock`` (and the pool's monotonic seconds): the time is whatever the test set."""

    def __init__(self, now: datetime):
        self.at = now

    def now(self) -> datetime:
        return self.at

    def monotonic(self) -> float:
        return 1000.0 + (self.at - T0).total_seconds()


class FakeWorker:
    """A started run, as the pool sees it (``Handle``). Like ``worker_main`` it marks its row
    running at once (with the hand-off time and queue wait); ``finish`` records a final status with the ledger's own ``ledger.finish``;
    ``die`` exits without one. Its sentinel is a real pipe that becomes readable at exit."""

    def __init__(self, spec: WorkerSpec, store: Store, clock: ManualClock, pid: int):
        self.spec, self._store, self._clock, self._pid = spec, store, clock, pid
        self._read, self._write = os.pipe()
        self.code: int | None = None
        self.signals: list[int] = []
        ledger.start(store, spec.run_id, now=clock.now(), dispatched_at=clock.now(), waited_s=spec.waited_s)

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def sentinel(self) -> int:
        return self._read

    def poll(self) -> int | None:
        return self.code

    def signal_tree(self, sig: int) -> None:
        self.signals.append(sig)

    def close(self) -> None:
        os.close(self._read)

    def finish(self, status: str = "succeeded", code: int = 0, **fields: Any) -> None:
        ledger.finish(self._store, self.spec.run_id, status, now=self._clock.now(), **fields)
        self._exit(code)

    def die(self, code: int) -> None:
        self._exit(code)

    def _exit(self, code: int) -> None:
        assert self.code is None, "a worker exits once"
        self.code = code
        os.close(self._write)


class FakeSpawner:
    """The ``Spawner`` seam: records every launch; ``fail`` makes the next launch raise."""

    def __init__(self, store: Store, clock: ManualClock):
        self.store, self.clock = store, clock
        self.workers: list[FakeWorker] = []
        self.most_at_once = 0
        self.fail: OSError | None = None
        self.prewarmed: list[int] = []  # what the pool asked to have ready, in order
        self.nears = 0  # how often the pool said a run is near

    def spawn(self, spec: WorkerSpec) -> FakeWorker:
        if self.fail is not None:
            exc, self.fail = self.fail, None
            raise exc
        worker = FakeWorker(spec, self.store, self.clock, pid=10_000 + len(self.workers))
        self.workers.append(worker)
        self.most_at_once = max(self.most_at_once, len(self.running()))
        return worker

    def tidy(self) -> None:
        """No process to retire."""

    def prewarm(self, runs: int) -> None:
        self.prewarmed.append(runs)

    def near(self) -> None:
        self.nears += 1

    def running(self, job: str | None = None) -> list[FakeWorker]:
        return [w for w in self.workers if w.code is None and job in (None, w.spec.job.name)]


class InProcessServe:
    """The pool and the schedule ticker wired as ``Serve.run`` wires them, ticked by hand."""

    def __init__(self, root: Path, jobs_yaml: str, *, max_parallel: int = 4):
        home = root / "home"
        home.mkdir(parents=True)
        (home / "config.yaml").write_text(f"serve:\n  max_parallel: {max_parallel}\n")
        (root / "jobs.yaml").write_text(textwrap.dedent(jobs_yaml))
        self.settings = Settings(home=home, jobs_path=root / "jobs.yaml", config_path=home / "config.yaml")
        self.store = self.settings.store
        self.clock = ManualClock(T0)
        # a worker's own connection (runner.db, or with --store postgresql the test's database)
        self.workers_store = Store.open(self.settings.database, migrate=False)
        self.spawner = FakeSpawner(self.workers_store, self.clock)
        log = logging.getLogger("tests.serve.inprocess")
        serve = self.settings.config.serve
        self.pool = Pool(
            store=self.store,
            spawner=self.spawner,
            clock=self.clock,
            log=log,
            paths=Paths(str(home), str(self.settings.jobs_path), str(self.settings.config_path)),
            max_parallel=serve.max_parallel,
            kill_grace=serve.kill_grace,
            on_pause=lambda name, why: self.schedule.mark_paused(name, why),
            monotonic=self.clock.monotonic,
        )
        self.schedule = ScheduleTicker(store=self.store, pool=self.pool, log=log)
        self.schedule.set_jobs(self.settings.jobs.jobs, T0)
        self.tickers = [self.pool, self.schedule]  # serve's order

    def loop(self, now: datetime) -> None:
        """One pass of serve's loop at ``now``."""
        assert now >= self.clock.at, "time only moves forward"
        self.clock.at = now
        for ticker in self.tickers:
            ticker.tick(now)

    def next_wake(self) -> datetime | None:
        now = self.clock.now()
        return min((w for t in self.tickers if (w := t.next_wake(now)) is not None), default=None)

    def run_until(self, end: datetime, *, then: Any = None) -> int:
        """Wake exactly when the tickers ask (as serve's loop does) until ``end``; after each
        pass call ``then()``. Returns the number of passes."""
        passes = stuck = 0
        while (wake := self.next_wake()) is not None and wake <= end:
            stuck = stuck + 1 if wake <= self.clock.now() else 0
            assert stuck < 100, f"serve would spin: a ticker keeps asking to be woken at {wake}"
            self.loop(max(wake, self.clock.now()))
            passes += 1
            if then is not None:
                then()
        self.loop(end)
        return passes

    def rows(self, job: str | None = None) -> list[dict[str, Any]]:
        where, params = ("WHERE job=?", (job,)) if job else ("", ())
        return self.store.query(f"SELECT * FROM runs {where} ORDER BY slot, attempt, created_at", params)

    def close(self) -> None:
        self.workers_store.close()
        self.store.close()


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Any]:
    made: list[InProcessServe] = []

    def factory(jobs_yaml: str, **kw: Any) -> InProcessServe:
        made.append(InProcessServe(tmp_path / f"p{len(made)}", jobs_yaml, **kw))
        return made[-1]

    yield factory
    for serve in made:
        serve.close()


def ends(rows: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    return [(r["status"], r["reason"]) for r in rows]


def finish_all(serve: InProcessServe) -> None:
    for worker in serve.spawner.running():
        worker.finish()


def test_every_5_minutes_over_an_hour_is_exactly_12_runs_each_on_its_slot(make):
    serve = make("jobs:\n  tick:\n" + EVERY_5)
    serve.run_until(T0 + timedelta(hours=1), then=lambda: finish_all(serve))
    rows = serve.rows("tick")
    slots = [at(f"12:{m:02d}") for m in range(5, 60, 5)] + [at("13:00")]
    assert [r["slot"] for r in rows] == [iso(s) for s in slots]
    assert all(r["trigger"] == "schedule" and r["status"] == "succeeded" and r["attempt"] == 1 for r in rows)
    assert [r["created_at"] for r in rows] == [r["slot"] for r in rows]  # queued at the slot, not a tick later
    assert [r["started_at"] for r in rows] == [r["slot"] for r in rows]
    assert all(r["waited_s"] == 0 for r in rows)
    assert len(serve.spawner.workers) == 12 and serve.pool.counts() == (0, 0)


def test_overlap_skip_records_skipped_queue_holds_one_and_starts_it_when_the_run_ends(make):
    serve = make("jobs:\n  s:\n" + EVERY_5 + "    overlap: skip\n  q:\n" + EVERY_5 + "    overlap: queue\n")
    serve.run_until(at("12:15"))  # three slots; no worker has ended
    skip, queue = serve.rows("s"), serve.rows("q")
    assert ends(skip) == [("running", None), ("skipped", "overlap"), ("skipped", "overlap")]
    assert ends(queue) == [("running", None), ("queued", None), ("skipped", "overlap")]
    assert f"run {skip[0]['id']}" in skip[1]["error"]
    assert [len(serve.spawner.running(j)) for j in ("s", "q")] == [1, 1]

    for worker in serve.spawner.running():
        worker.finish()
    assert len(wait(serve.pool.sentinels(), 0)) == 2  # serve's loop would wake on the exits now
    serve.loop(at("12:16"))
    skip, queue = serve.rows("s"), serve.rows("q")
    assert [r["status"] for r in skip] == ["succeeded", "skipped", "skipped"]
    assert [r["status"] for r in queue] == ["succeeded", "running", "skipped"]
    assert queue[1]["started_at"] == iso(at("12:16")) and queue[1]["waited_s"] == 360.0
    assert serve.spawner.running("s") == []


def test_max_parallel_is_respected_and_waiting_runs_start_oldest_slot_first(make):
    jobs = "jobs:\n" + "".join(f"  j{i}:\n{EVERY_5}    overlap: allow\n" for i in range(5))
    serve = make(jobs, max_parallel=2)
    serve.run_until(at("12:05"))
    assert len(serve.spawner.running()) == 2 and serve.pool.counts() == (2, 3)
    serve.run_until(at("12:10"))  # a second round of five fires queues behind the first
    assert serve.pool.counts() == (2, 8)
    order: list[str] = []

    def finish_one() -> None:
        for worker in serve.spawner.running()[:1]:
            order.append(iso(worker.spec.slot) or "-")
            worker.finish()

    minute = at("12:10")
    while serve.pool.counts() != (0, 0):
        minute += timedelta(seconds=10)
        finish_one()
        serve.loop(minute)
    assert serve.spawner.most_at_once == 2
    assert order == sorted(order)  # the 12:05 slots all ran before any 12:10 slot
    rows = serve.rows()
    assert len(rows) == 10 and all(r["status"] == "succeeded" for r in rows)
    assert max(r["waited_s"] for r in rows) > 0


def test_a_retry_starts_only_once_the_clock_passes_not_before(make):
    serve = make(
        'jobs:\n  flaky:\n    schedule: "0 * * * *"\n    agent: false\n    pre_run: exit 3\n'
        "    retries: {attempts: 2, backoff: 60s}\n"
    )
    serve.run_until(at("13:00"))
    [first] = serve.spawner.running()
    serve.clock.at = at("13:01")
    first.finish("failed", code=3, reason="pre_run", error="pre_run exited 3")
    serve.loop(at("13:01"))
    retry = serve.rows("flaky")[1]
    assert (retry["status"], retry["trigger"], retry["attempt"]) == ("queued", "retry", 2)
    assert retry["not_before"] == iso(at("13:02")) and retry["parent_run"] == first.spec.run_id
    assert serve.pool.next_wake(at("13:01")) == at("13:02")  # the pool asks serve to wake for it
    serve.loop(at("13:01", 59.999))
    assert serve.spawner.running() == [] and serve.rows("flaky")[1]["status"] == "queued"
    serve.run_until(at("13:02"))
    [second] = serve.spawner.running()
    assert second.spec.run_id == retry["id"] and serve.rows("flaky")[1]["started_at"] == iso(at("13:02"))

    serve.clock.at = at("13:03")
    second.finish("failed", code=3, reason="pre_run")
    serve.run_until(at("13:04", 59))  # backoff doubles: 120 s after 13:03
    assert serve.spawner.running() == []
    serve.run_until(at("13:05"))
    [third] = serve.spawner.running()
    third.finish("failed", code=3, reason="pre_run")
    serve.run_until(at("13:59"))
    rows = serve.rows("flaky")
    assert [(r["attempt"], r["status"], r["trigger"]) for r in rows] == [
        (1, "failed", "schedule"),
        (2, "failed", "retry"),
        (3, "failed", "retry"),
    ]
    assert [r["started_at"] for r in rows] == [iso(at(t)) for t in ("13:00", "13:02", "13:05")]
    assert len(serve.spawner.workers) == 3  # attempts spent: no fourth run before the next slot


@pytest.mark.parametrize(
    ("code", "says"),
    [(-signal.SIGKILL, "killed by signal SIGKILL"), (0, "exited with code 0"), (1, "exited with code 1")],
)
def test_a_worker_that_dies_without_a_status_ends_failed_never_running(make, code, says):
    serve = make("jobs:\n  d:\n" + EVERY_5)
    serve.run_until(at("12:05"))
    [worker] = serve.spawner.running()
    assert serve.rows("d")[0]["status"] == "running"
    worker.die(code)
    serve.loop(at("12:05", 1))
    [row] = serve.rows("d")
    assert (row["status"], row["reason"]) == ("failed", "worker_died")
    assert says in row["error"] and "before recording a final status" in row["error"]
    assert serve.pool.counts() == (0, 0)
    serve.run_until(at("12:10"), then=lambda: finish_all(serve))  # the next slot runs as usual
    assert [r["status"] for r in serve.rows("d")] == ["failed", "succeeded"]


def test_a_worker_that_cannot_start_is_recorded_failed(make):
    serve = make("jobs:\n  d:\n" + EVERY_5)
    serve.spawner.fail = OSError("Resource temporarily unavailable")
    serve.run_until(at("12:05"))
    [row] = serve.rows("d")
    assert (row["status"], row["reason"]) == ("failed", "spawn")
    assert "Resource temporarily unavailable" in row["error"]
    assert serve.spawner.workers == [] and serve.pool.counts() == (0, 0)


def test_a_worker_s_own_final_status_is_kept(make):
    serve = make("jobs:\n  d:\n" + EVERY_5)
    serve.run_until(at("12:05"))
    [worker] = serve.spawner.running()
    worker.finish("failed", code=1, reason="max_iterations", error="reached max_iterations (30)")
    serve.loop(at("12:06"))
    [row] = serve.rows("d")
    assert (row["status"], row["reason"], row["ended_at"]) == ("failed", "max_iterations", iso(at("12:05")))


def test_a_run_past_its_timeout_gets_sigterm_then_sigkill_and_ends_timed_out(make):
    serve = make("jobs:\n  slow:\n" + EVERY_5 + "    timeout: 2m\n")  # kill_grace: the default 5 s
    serve.run_until(at("12:05"))
    [worker] = serve.spawner.running()
    assert serve.pool.next_wake(at("12:05")) == at("12:07")
    serve.loop(at("12:06", 59.9))
    assert worker.signals == []
    serve.run_until(at("12:07"))
    assert worker.signals == [signal.SIGTERM]  # the worker ignores it and keeps going
    serve.run_until(at("12:07", 4.9))
    assert worker.signals == [signal.SIGTERM]
    serve.run_until(at("12:07", 5))
    assert worker.signals == [signal.SIGTERM, signal.SIGKILL]
    worker.die(-signal.SIGKILL)
    serve.loop(at("12:07", 5.1))
    [row] = serve.rows("slow")
    assert ends([row]) == [("timed_out", "timeout")]
    assert "after the job's timeout of 2m" in row["error"]


def test_workers_for_script_only_slots_are_asked_for_once_ahead_of_the_slot(make):
    agent = '    schedule: "*/5 * * * *"\n    prompt: go\n'
    jobs = "jobs:\n" + "".join(f"  s{i}:\n{EVERY_5}" for i in range(5)) + "  a:\n" + agent
    serve = make(jobs, max_parallel=3)
    serve.loop(at("12:04", 40))  # 20 s before the slot: too early
    assert serve.spawner.prewarmed == []
    serve.loop(at("12:04", 51))
    assert serve.spawner.prewarmed == [3]  # five script-only runs due, three start at once; not the agent's
    serve.loop(at("12:04", 55))
    assert serve.spawner.prewarmed == [3]  # once per fire time
    serve.loop(at("12:05"))
    assert len(serve.spawner.running()) == 3
    serve.loop(at("12:09", 52))  # the next slot, with three runs still going: no room to start more
    assert serve.spawner.prewarmed == [3]


def test_workers_that_cannot_be_started_ahead_leave_the_slot_to_fire(make, caplog):
    serve = make("jobs:\n  s:\n" + EVERY_5)

    def refuse(runs: int) -> None:
        raise OSError("the forkserver is gone")

    serve.spawner.prewarm = refuse
    serve.loop(at("12:04", 55))
    assert "cannot start workers ahead of the next slot: the forkserver is gone" in caplog.text
    serve.loop(at("12:05"))
    assert len(serve.spawner.running("s")) == 1
