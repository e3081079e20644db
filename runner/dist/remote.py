"""serve's side of the Celery executor: a ``Launcher`` (``Spawner``) whose runs execute on ``runner worker``s.

``spawn`` sends ``runner.execute(run_id, jobs_hash, job)`` to the job's queue and returns a
``RemoteHandle``; the pool treats it like a local worker. A watcher thread follows the in-flight
rows in the shared store (every ``POLL_S``): a final status is the run's "exit" (the handle's
``poll``) and wakes serve's loop through a pipe (the handle's ``sentinel``); a row no worker has
taken ``resend_s`` after it was sent is sent again (the broker lost it, e.g. a restart without
persistence; a duplicate message is a no-op at the worker's claim). Stopping a remote run
(timeout, ``overlap: replace``) writes ``runs.stop_request``, which the worker holding it reads;
a run no worker took yet is ended at once and never starts.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from runner.dist.app import TASK
from runner.dist.jobshash import HashCache
from runner.serve.launcher import WorkerSpec
from runner.statuses import RunStatus
from runner.store import Store, ledger

POLL_S = 0.1


@dataclass
class _Flight:
    run_id: str
    job: str
    queue: str
    jobs_hash: str
    sent_at: float  # monotonic: when it was (last) sent, or is due to be sent again after a broker fault


class CelerySpawner:
    """Sends runs to the broker; follows them in the store. ``app`` is the Celery app."""

    def __init__(self, *, app: Any, store: Store, resend_s: float, lost_after_s: float, log: logging.Logger):
        self.app, self.store, self.resend_s, self.log = app, store, resend_s, log
        self.lost_after_s = lost_after_s
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()  # sends come from serve's loop and from the watcher
        self._flights: dict[str, _Flight] = {}
        self._exits: dict[str, int] = {}
        self._hashes = HashCache()
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="runner-celery-watch", daemon=True)
        self._thread.start()

    def connect(self) -> None:
        """Open a broker connection now, so the first fire does not pay for it (a broker that is
        down is logged; sends retry)."""
        try:
            with self._send_lock, self.app.producer_pool.acquire(block=True) as producer:
                producer.connection.ensure_connection(max_retries=1)
        except Exception as exc:  # noqa: BLE001 - broker faults differ per transport
            self.log.error("cannot reach the broker yet: %s", exc)

    # -- the Spawner protocol -------------------------------------------------------------------
    def spawn(self, spec: WorkerSpec) -> RemoteHandle:
        inputs = [Path(p) for p in spec.control_inputs]
        digest = self._hashes.get(Path(spec.jobs_path), inputs)
        flight = _Flight(spec.run_id, spec.job.name, spec.job.spec.queue, digest, time.monotonic())
        with self._lock:
            self._flights[spec.run_id] = flight
        self._send(flight)
        return RemoteHandle(self, spec.run_id)

    def lost(self, store: Store, now: datetime) -> list[str]:
        return ledger.recover_stale(store, now=now, lost_after_s=self.lost_after_s)

    def tidy(self) -> None:
        """Nothing to retire here: the runs' processes belong to the workers."""

    def prewarm(self, runs: int) -> None:
        """Nothing to start here: the workers have their own processes."""

    def adopt(self, run_id: str, job: str, queue: str) -> RemoteHandle:
        """Follow a run a worker already holds (a previous leader sent it)."""
        with self._lock:
            self._flights[run_id] = _Flight(run_id, job, queue, "", time.monotonic())
        return RemoteHandle(self, run_id)

    def close(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)
        os.close(self._wake_r)
        os.close(self._wake_w)

    # -- what the handles ask -------------------------------------------------------------------
    def fileno(self) -> int:
        return self._wake_r

    def exit_code(self, run_id: str) -> int | None:
        _drain(self._wake_r)
        with self._lock:
            return self._exits.get(run_id)

    def stop(self, run_id: str, sig: int) -> None:
        """Ask the worker holding ``run_id`` to stop it (SIGTERM: finish the step; SIGKILL: at once);
        a run no worker took yet ends ``interrupted`` here and is never started."""
        if ledger.drop_unclaimed(self.store, run_id):
            return
        ledger.request_stop(self.store, run_id, "kill" if sig == signal.SIGKILL else "term")

    def forget(self, run_id: str) -> None:
        with self._lock:
            self._flights.pop(run_id, None)
            self._exits.pop(run_id, None)

    # -- internals --------------------------------------------------------------------------------
    def _send(self, flight: _Flight) -> None:
        try:
            with self._send_lock:
                self.app.send_task(TASK, args=[flight.run_id, flight.jobs_hash, flight.job], queue=flight.queue)
        except Exception as exc:  # noqa: BLE001 - broker faults differ per transport; the row is sent again
            self.log.error("cannot send run %s of %s to the broker: %s; will retry", flight.run_id, flight.job, exc)
            flight.sent_at = time.monotonic() - self.resend_s + 1.0
            return
        flight.sent_at = time.monotonic()

    def _watch(self) -> None:
        while not self._stopped.wait(POLL_S):
            with self._lock:
                flights = [f for f in self._flights.values() if f.run_id not in self._exits]
            if not flights:
                continue
            try:
                self._check(flights)
            except Exception as exc:  # noqa: BLE001 - a store fault: logged, the next poll tries again
                self.log.error("celery executor: cannot read the ledger: %s", exc)

    def _check(self, flights: list[_Flight]) -> None:
        rows = ledger.rows_of(self.store, [f.run_id for f in flights])
        ended = False
        now = time.monotonic()
        for flight in flights:
            row = rows.get(flight.run_id)
            if row is None or row.status not in (RunStatus.QUEUED, RunStatus.RUNNING):
                code = 0 if row is not None and row.status in (RunStatus.SUCCEEDED, RunStatus.SKIPPED) else 1
                with self._lock:
                    self._exits[flight.run_id] = code
                ended = True
            elif row.worker is None and flight.jobs_hash and now - flight.sent_at >= self.resend_s:
                self.log.warning("run %s of %s: no worker took it yet; sending it again", flight.run_id, flight.job)
                self._send(flight)
        if ended:
            _wake(self._wake_w)


class RemoteHandle:
    """A run on a ``runner worker``, as the pool sees it (``Handle``)."""

    def __init__(self, spawner: CelerySpawner, run_id: str):
        self._spawner, self.run_id = spawner, run_id

    @property
    def pid(self) -> int:
        return 0  # no process of this machine

    @property
    def sentinel(self) -> int:
        return self._spawner.fileno()

    def poll(self) -> int | None:
        return self._spawner.exit_code(self.run_id)

    def signal_tree(self, sig: int) -> None:
        self._spawner.stop(self.run_id, sig)

    def close(self) -> None:
        self._spawner.forget(self.run_id)


def _wake(fd: int) -> None:
    """Make a sentinel readable: a remote worker's run or attempt ended."""
    try:
        os.write(fd, b"!")
    except BlockingIOError:
        pass  # the reader is being woken already


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass  # drained
