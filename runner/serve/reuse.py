"""Reusable workers: one forked worker runs script-only runs (``agent: false``) one after another.

A worker forked per run pays for copy-on-write: Python's reference counts write to every page
its run touches, so each fresh child copies about 2,000 pages (~13 ms of CPU on top of the
run's ~7 ms), and a burst of 200 runs tops out near 80 runs/s on 2 cores. A worker that takes
its next run keeps the pages it already copied.

Only script-only runs are reused: they execute the operator's ``pre_run`` and nothing a model
chose. Agent runs keep a fresh process each. ``serve.worker_max_runs`` bounds the runs one
process takes (then it is replaced, as Celery's ``worker_max_tasks_per_child``); 1 turns this off.

The protocol keeps a run's signals inside that run:

- serve hands a worker its next run only after it has read the worker's ``done`` for the last
  one, so at most one run is in flight per worker;
- serve signals a worker (timeout, replace, cancel at shutdown) only while its run is in flight,
  and a worker once signalled is never handed another run: serve closes its channel and the
  worker exits. A worker whose run saw a stop (a signal, ``runner runs cancel``) retires itself;
- between runs the worker ends whatever the last run left behind (it is their subreaper), and
  a stop signal while idle ends the worker.

Ahead of a burst it can see (script-only slots due within ``runner.serve.schedule.AHEAD``),
serve starts the workers it will need and each warms up with one throwaway run of its own
(``warm_up``), so the copy-on-write cost is paid before the slot instead of inside it.

serve and a worker talk over their own socket pair (the forkserver passes the worker's end,
``Spawn(channel=True)``), in the forkserver's frames: serve sends ``("run", spec)`` (the keys
the worker holds travelled once, with its fork), the
worker answers ``("done", run_id, exit_code)``. A worker that dies (killed, crashed, the second
SIGTERM) closes the channel; its run's exit code is then the one the forkserver reports.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.agent.tracing import ENDPOINT_ENV
from runner.clock import utcnow
from runner.config.database import ENV
from runner.config.jobs import load_jobs
from runner.host import secrets
from runner.host.procs import (
    STOP_SIGNALS,
    become_subreaper,
    end_descendants,
    install_two_stage_stop,
    nothing_left,
)
from runner.run.forks import ForkError, Frames, Spawn, WarmForks, WorkerHandle, send_frame
from runner.serve.launcher import Kept, WorkerSpec, run_spec
from runner.settings import Settings
from runner.statuses import RunStatus, Trigger
from runner.store import Store, ledger

if TYPE_CHECKING:
    from runner.config.jobs import Job

WORKER = "runner.serve.reuse:reuse_main"
IDLE_S = 120.0  # an idle worker is retired after this long (a job every minute keeps its worker)
WARM_JOB = "jobs:\n  warm-up:\n    agent: false\n    pre_run: 'true'\n"


# -- the worker's side ----------------------------------------------------------------------------
def reuse_main(channel: socket.socket, held: dict[str, str], warm: bool = False) -> None:
    """A reusable worker's body: run what serve hands over until serve closes the channel;
    ``warm``: first one throwaway run (``warm_up``), before any run serve hands over."""

    if held:
        secrets.install(held)
    become_subreaper()
    if warm:
        warm_up()
    kept = Kept()
    try:
        _take_runs(channel, kept)
    finally:
        kept.close()


def _take_runs(channel: socket.socket, kept: Kept) -> None:
    """Run what serve hands over, one run at a time, until serve closes the channel or a run stops."""

    frames = Frames()
    while True:  # stop signals are at their defaults here: the forkserver's child starts so, _idle() after each run
        message = _receive(channel, frames)
        if message is None:
            return  # serve closed the channel: retired, or serve is gone
        spec = message[1]
        handed = utcnow()
        stop = threading.Event()
        install_two_stage_stop(stop)
        code = run_spec(spec, stop, handed, kept)
        _idle()
        _end_leftovers()  # what the run left behind ends with it, as with a worker that exits
        try:
            send_frame(channel, ("done", spec.run_id, code))
        except OSError:
            return  # serve is gone (the run's row says how it ended): nobody to take another run from
        if stop.is_set():
            return  # a stopped run's worker takes no more: a late signal must never reach another run


class WarmKit:
    """What every warm-up starts from, made once in the forkserver (``prepare_warm_up``, a set-up
    call of serve's launcher): the warm-up job, parsed, and a migrated scratch store to copy. The
    forkserver removes it when it exits."""

    def __init__(self) -> None:
        self.dir: Path | None = None
        self.job: Job | None = None

    def prepare(self) -> None:
        import atexit

        scratch = Path(tempfile.mkdtemp(prefix="runner-warm-"))
        atexit.register(shutil.rmtree, scratch, True)
        (scratch / "jobs.yaml").write_text(WARM_JOB, encoding="utf-8")
        self.job = load_jobs(scratch / "jobs.yaml").get("warm-up")
        Store.open(scratch / "runner.db").close()  # a file path: SQLite, whatever the environment says
        self.dir = scratch


KIT = WarmKit()  # filled in the forkserver by ``prepare_warm_up``; empty anywhere else


def prepare_warm_up() -> None:
    """A set-up call the forkserver runs once, before it forks any worker."""
    KIT.prepare()


def warm_up(kit: WarmKit = KIT) -> bool:
    """One script-only run (``pre_run: true``) through the same ``execute`` as a real run, in a
    scratch RUNNER_HOME with a copy of the kit's store, so the pages a run touches are this
    worker's before its first real run (about 1,600 page faults and 5-6 ms of CPU moved out of
    the burst). Nothing of it reaches serve's store (``RUNNER_DATABASE_URL`` is set aside for
    it), the operator's tracing (``OTEL_EXPORTER_OTLP_ENDPOINT`` too) or the ledger. False when
    there is no kit or it failed: that only costs the warmth."""

    if kit.dir is None or kit.job is None:
        return False
    aside = {name: os.environ.pop(name) for name in (ENV, ENDPOINT_ENV) if name in os.environ}
    scratch = Path(tempfile.mkdtemp(prefix="runner-warm-run-"))
    try:
        home, jobs = scratch / "home", kit.dir / "jobs.yaml"
        home.mkdir()
        shutil.copyfile(kit.dir / "runner.db", home / "runner.db")
        settings = Settings(home=home, jobs_path=jobs, config_path=home / "config.yaml")
        if settings.database.path != home / "runner.db":
            raise RuntimeError("the warm-up would not use its scratch store")
        store = Store.open(home / "runner.db", migrate=False)
        run_id = ledger.open_run(store, job="warm-up", trigger=Trigger.MANUAL, status=RunStatus.QUEUED)
        store.close()
        spec = WorkerSpec(str(home), str(jobs), str(home / "config.yaml"), kit.job, run_id, Trigger.MANUAL)
        return run_spec(spec, threading.Event(), utcnow()) == 0
    except Exception as exc:  # noqa: BLE001 - the warm-up is an optimisation: the worker still works
        print(f"runner serve: a worker's warm-up failed: {exc}", file=sys.stderr)
        return False
    finally:
        os.environ.update(aside)
        shutil.rmtree(scratch, ignore_errors=True)
        _end_leftovers()


def _end_leftovers() -> None:
    """Kill and reap whatever a run started that is still there (this worker is its subreaper)."""
    if not nothing_left():
        end_descendants()


def _idle() -> None:
    """Between runs a stop signal ends the worker (serve never signals an idle one)."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)


def _receive(channel: socket.socket, frames: Frames) -> tuple[Any, ...] | None:
    pending: list[tuple[Any, ...]] = []
    while not pending:
        data = channel.recv(65536)
        if not data:
            return None
        pending = frames.feed(data)
    return pending[0]  # serve sends one run at a time


# -- serve's side ---------------------------------------------------------------------------------
class Worker(WorkerHandle):
    """serve's handle on one reusable worker: the forked process (pid, exit code, signals, as
    ``WorkerHandle``), its channel and what it answered."""

    def __init__(self, forks: WarmForks, channel: socket.socket, ticket: int):
        super().__init__(forks, ticket)
        self.channel = channel
        self.frames = Frames()
        self.done: dict[str, int] = {}  # run id -> exit code, as the worker reported
        self.runs = 0
        self.retired = False  # signalled, dead or used up: it takes no more runs
        self.closed = False  # its channel is closed (EOF seen, or serve retired it)
        self.idle_since = 0.0

    @property
    def sentinel(self) -> int:
        """The channel (readable at ``done`` or the worker's death); once that is closed, the
        forkserver's socket, which brings the worker's exit code."""
        return super().sentinel if self.closed else self.channel.fileno()

    def hand(self, spec: WorkerSpec) -> None:
        """Give the worker its next run (OSError: its channel is broken)."""
        send_frame(self.channel, ("run", spec))
        self.runs += 1

    def read(self) -> None:
        """Take what the worker sent, without waiting; EOF retires it."""
        if self.closed:
            return
        chunks = []
        try:
            while data := self.channel.recv(65536, socket.MSG_DONTWAIT):
                chunks.append(data)
            self.retire()  # EOF: the worker is gone
        except BlockingIOError:
            pass
        except OSError:
            self.retire()
        for message in self.frames.feed(b"".join(chunks)):
            if message[0] == "done":
                self.done[str(message[1])] = int(message[2])

    def signal_tree(self, sig: int) -> None:
        """Signal the worker's tree (its run is in flight); it takes no further run."""
        self.retired = True
        super().signal_tree(sig)

    def retire(self) -> None:
        """Close serve's end of the channel: the worker reads EOF and exits."""
        if not self.closed:
            self.closed = self.retired = True
            self.channel.close()


class ReusedRun:
    """One run on a reusable worker, as the pool sees it (``runner.serve.launcher.Handle``)."""

    def __init__(self, shelf: Shelf, worker: Worker, run_id: str):
        self._shelf, self.worker, self.run_id = shelf, worker, run_id

    @property
    def pid(self) -> int:
        return self.worker.pid

    @property
    def sentinel(self) -> int:
        return self.worker.sentinel

    def poll(self) -> int | None:
        """The run's exit code as the worker reported it; else, once the worker is gone, the
        worker's own exit code (the forkserver's report; LOST_EXIT when it never started)."""
        worker = self.worker
        worker.read()
        if self.run_id in worker.done:
            return worker.done[self.run_id]
        return worker.poll() if worker.closed else None

    def signal_tree(self, sig: int) -> None:
        """Send ``sig`` to the worker and its descendants; the worker takes no further run."""
        self.worker.signal_tree(sig)

    def close(self) -> None:
        self._shelf.release(self.worker, self.run_id)


class Shelf:
    """The reusable workers of one launcher: at most one run in flight on each; idle ones wait
    for the next script-only run, and are retired after ``max_runs`` runs or ``idle_s`` idle."""

    def __init__(
        self,
        forks: WarmForks,
        max_runs: int,
        *,
        idle_s: float = IDLE_S,
        monotonic: Callable[[], float] = time.monotonic,
    ):
        self.forks, self.max_runs, self.idle_s, self.monotonic = forks, max_runs, idle_s, monotonic
        self._idle: list[Worker] = []
        self._leaving: list[Worker] = []  # retired, until the forkserver reports their exit

    def spawn(self, spec: WorkerSpec, held: dict[str, str]) -> ReusedRun:
        """Hand ``spec`` to an idle worker, else to a new one (ForkError: the forkserver cannot fork)."""
        while self._idle:
            worker = self._idle.pop()  # the most recently used: its pages are the warmest
            worker.read()  # an idle worker that died shows as EOF
            if worker.closed:
                self._leaving.append(worker)
                continue
            try:
                worker.hand(spec)
            except OSError:
                self._retire(worker)
                continue
            return ReusedRun(self, worker, spec.run_id)
        worker = self._start(held)
        try:
            worker.hand(spec)
        except OSError as exc:
            self._retire(worker)
            raise ForkError(f"cannot hand the run to a new worker: {exc}") from None
        return ReusedRun(self, worker, spec.run_id)

    def prewarm(self, workers: int, held: dict[str, str]) -> int:
        """Have ``workers`` idle workers ready: start the missing ones, each warming up with a
        throwaway run before it takes a real one; returns how many were started."""
        missing = max(0, workers - len(self._idle))
        now = self.monotonic()
        for _ in range(missing):
            worker = self._start(held, warm=True)
            worker.idle_since = now
            self._idle.insert(0, worker)  # warming: reused after the warm ones
        return missing

    def _start(self, held: dict[str, str], *, warm: bool = False) -> Worker:
        ours, theirs = socket.socketpair()
        try:
            ticket = self.forks.submit(Spawn(WORKER, (held, warm), channel=True), theirs)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()  # the worker holds its own copy now
        return Worker(self.forks, ours, ticket)

    def release(self, worker: Worker, run_id: str) -> None:
        """The pool is done with ``run_id``: the worker waits for the next run, or retires."""
        worker.done.pop(run_id, None)
        if worker.retired or worker.closed or worker.runs >= self.max_runs:
            self._retire(worker)
            return
        worker.idle_since = self.monotonic()
        self._idle.append(worker)

    def tidy(self) -> None:
        """Retire workers idle longer than ``idle_s``; forget retired ones that have exited."""
        now = self.monotonic()
        for worker in [w for w in self._idle if now - w.idle_since >= self.idle_s]:
            self._idle.remove(worker)
            self._retire(worker)
        for worker in list(self._leaving):
            if worker.poll() is not None:
                self._leaving.remove(worker)
                worker.close()  # the forkserver's record of its exit is not needed any more

    def counts(self) -> tuple[int, int]:
        """(idle workers, retired workers not yet exited)."""
        return len(self._idle), len(self._leaving)

    def close(self) -> None:
        for worker in self._idle:
            worker.retire()
        self._idle.clear()

    def _retire(self, worker: Worker) -> None:
        worker.retire()
        self._leaving.append(worker)
