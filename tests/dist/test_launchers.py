"""The ``runner.run.forks.Launcher`` contract, run against both implementations of serve's runs: a
worker forked here from a warm forkserver (``ForkLauncher``) and a run sent to a real ``runner
worker`` through a real redis-server (``CelerySpawner``). Each case has a queued ledger row in a
shared store; spawn, wait (``poll`` and ``sentinel``), signal and lost must mean the same."""

from __future__ import annotations

import logging
import select
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runner.clock import utcnow
from runner.config.jobs import inputs_of
from runner.run.forks import Handle
from runner.host.procs import ProcessTree
from runner.serve.launcher import WorkerSpec
from runner.settings import Settings
from runner.statuses import RunStatus, Trigger
from runner.store import Store, ledger
from runner.testing import FakeOpenAI
from tests.dist.conftest import Cluster
from tests.servehelp import wait_for

JOBS = """
jobs:
  quick:
    agent: false
    pre_run: "echo hello"
  slow:
    agent: false
    pre_run: "sleep 120"
"""


@dataclass
class Case:
    launcher: Any  # a Launcher[WorkerSpec]
    store: Store
    settings: Settings
    vanish: Callable[[Handle], None]  # the worker goes away without a word (its machine, or its process)

    def spawn(self, job: str) -> tuple[str, Handle]:
        run_id = ledger.open_run(self.store, job=job, trigger=Trigger.MANUAL, status=RunStatus.QUEUED)
        s = self.settings
        jobs = s.jobs.jobs
        spec = WorkerSpec(
            str(s.home),
            str(s.jobs_path),
            str(s.config_path),
            jobs[job],
            run_id,
            Trigger.MANUAL,
            control_inputs=tuple(str(p) for p in inputs_of(jobs)),
        )
        return run_id, self.launcher.spawn(spec)

    def status(self, run_id: str) -> RunStatus | None:
        row = ledger.get(self.store, run_id)
        return row.status if row else None


@pytest.fixture(params=["fork", "celery"])
def case(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Case]:
    shared = tmp_path / "shared"
    shared.mkdir()
    url = f"sqlite://{shared / 'runner.db'}"
    monkeypatch.setenv("RUNNER_DATABASE_URL", url)  # this process and the forkserver it starts
    if request.param == "fork":
        yield from _fork_case(tmp_path)
    else:
        yield from _celery_case(tmp_path, request.getfixturevalue("redis_url"), url)


def _fork_case(tmp_path: Path) -> Iterator[Case]:
    from runner.serve.launcher import ForkLauncher

    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "jobs.yaml").write_text(JOBS)
    settings = Settings(home=home, jobs_path=tmp_path / "jobs.yaml", config_path=home / "config.yaml")
    launcher = ForkLauncher(config_path=settings.config_path)
    launcher.warm()()
    try:
        yield Case(launcher, settings.store, settings, lambda h: ProcessTree(h.pid).signal(signal.SIGKILL))
    finally:
        launcher.close()
        settings.store.close()


def _celery_case(tmp_path: Path, redis_url: str, url: str) -> Iterator[Case]:
    from runner.dist.app import celery_app
    from runner.dist.remote import CelerySpawner

    fake = FakeOpenAI().start()
    cluster = Cluster(tmp_path, fake, redis_url, url)
    cluster.write_jobs(JOBS)
    worker = cluster.worker("w1", concurrency=2)
    home = tmp_path / "serve-home"
    home.mkdir()
    settings = Settings(home=home, jobs_path=cluster.source / "jobs.yaml", config_path=home / "config.yaml")
    store = settings.store
    launcher = CelerySpawner(
        app=celery_app(redis_url), store=store, resend_s=5, lost_after_s=3, log=logging.getLogger("tests.launchers")
    )
    try:
        cluster.wait_ready(worker, "ready")
        yield Case(launcher, store, settings, lambda h: worker.kill_tree())
    finally:
        launcher.close()
        cluster.stop()
        store.close()
        fake.stop()


def wait_exit(handle: Handle, timeout: float = 60) -> int:
    """As serve waits: on the handle's sentinel, then ``poll``."""
    deadline = time.monotonic() + timeout
    while (code := handle.poll()) is None:
        assert time.monotonic() < deadline, "the worker did not end"
        select.select([handle.sentinel], [], [], 0.5)
    return code


def test_a_spawned_worker_runs_its_row_and_ends(case: Case) -> None:
    run_id, handle = case.spawn("quick")
    assert wait_exit(handle) == 0
    handle.close()
    assert case.status(run_id) == RunStatus.SUCCEEDED


def test_a_signalled_worker_ends_and_the_ledger_says_it_died(case: Case) -> None:
    run_id, handle = case.spawn("slow")
    wait_for(lambda: case.status(run_id) == RunStatus.RUNNING, timeout=30, what="the run to start")
    handle.signal_tree(signal.SIGKILL)
    code = wait_exit(handle, timeout=30)
    assert code != 0
    ledger.worker_died(case.store, run_id, code)  # what serve's pool does (a runner worker did it already)
    handle.close()
    row = ledger.get(case.store, run_id)
    assert row is not None and (row.status, row.reason) == (RunStatus.FAILED, ledger.Reason.WORKER_DIED)


def test_a_vanished_worker_is_declared_lost_once(case: Case) -> None:
    run_id, handle = case.spawn("slow")
    wait_for(lambda: case.status(run_id) == RunStatus.RUNNING, timeout=30, what="the run to start")
    case.vanish(handle)
    found: list[str] = []
    wait_for(
        lambda: bool(found.extend(case.launcher.lost(case.store, utcnow())) or run_id in found),
        timeout=30,
        what="the launcher to find the run lost",
    )
    row = ledger.get(case.store, run_id)
    assert row is not None and (row.status, row.reason) == (RunStatus.UNKNOWN, ledger.Reason.WORKER_LOST)
    assert run_id not in case.launcher.lost(case.store, utcnow())  # one verdict, once
    handle.close()
