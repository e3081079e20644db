"""The Celery ``Launcher``s: serve's runs and the kanban dispatcher's attempts execute on ``runner
worker``s. What both share is ``Broker``: a message sent to the job's queue names what to run; a
watcher thread follows it in the shared store (every ``POLL_S``): its end is the "exit" (the
handle's ``poll``) and wakes the supervisor through a pipe (the handle's ``sentinel``); a message
no worker has taken ``resend_s`` after it was sent is sent again (the broker lost it, e.g. a
restart without persistence; a duplicate message is a no-op at the worker's claim). ``lost``: a
worker whose heartbeat stopped (``ledger.recover_stale``).

Here, serve's side (``CelerySpawner``, serve's ``RemoteExecutor`` too: the composition root,
``runner.cli.serve``, passes ``celery_executor`` to serve only when config.yaml asks for it):
``spawn`` sends ``runner.execute(run_id, jobs_hash, job)`` and returns a ``Remote`` handle; the
pool treats it like a local worker. Stopping a remote run (timeout, ``overlap: replace``) writes
``runs.stop_request``, which the worker holding it reads; a run no worker took yet is ended at once
and never starts. After a takeover the pool follows the runs workers hold; the lost-worker
recovery ticks beside the schedule (``LostRunsTicker``). The dispatcher's side is
``runner.dist.kanban_remote``.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from runner.dist.app import TASK
from runner.dist.jobshash import HashCache
from runner.serve.launcher import Launcher, WorkerSpec
from runner.settings import Settings
from runner.statuses import RunStatus
from runner.store import Store, ledger

if TYPE_CHECKING:
    from runner.config.jobs import Job
    from runner.serve.host import Ticker
    from runner.serve.pool import Pool

POLL_S = 0.1
K = TypeVar("K", bound=Hashable)


@dataclass
class Sent(Generic[K]):
    key: K  # a run id, or a kanban claim (task id, fence)
    label: str  # for the log: "run R of J", "kanban task T (attempt N)"
    task: str
    args: list[Any]
    queue: str
    sent_at: float  # monotonic: when it was (last) sent, or is due to be sent again after a broker fault
    renewed_at: float = 0.0  # monotonic: a kanban claim's lease, kept while no worker took it


class Broker(Generic[K]):
    """Messages sent to the broker and followed in the store (see the module). A subclass sets its
    own attributes before ``__init__`` starts the watcher, and follows what is pending in ``_follow``."""

    def __init__(self, app: Any, log: logging.Logger, *, resend_s: float, lost_after_s: float, name: str):
        self.app, self.log, self.resend_s, self.lost_after_s = app, log, resend_s, lost_after_s
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()  # sends come from the supervisor's loop and from the watcher
        self._sent: dict[K, Sent[K]] = {}
        self._exits: dict[K, int] = {}
        self.wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=name, daemon=True)
        self._thread.start()

    def lost(self, store: Store, now: datetime) -> list[str]:
        return ledger.recover_stale(store, now=now, lost_after_s=self.lost_after_s)

    def close(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)
        os.close(self.wake_r)
        os.close(self._wake_w)

    # -- what the handles ask -------------------------------------------------------------------
    def exit_code(self, key: K) -> int | None:
        try:
            while os.read(self.wake_r, 4096):
                pass
        except BlockingIOError:
            pass  # drained
        with self._lock:
            return self._exits.get(key)

    def stop(self, key: K, sig: int) -> None:
        """Nothing by default: a kanban attempt's worker stops when its claim is gone (the lease)."""

    def forget(self, key: K) -> None:
        with self._lock:
            self._sent.pop(key, None)
            self._exits.pop(key, None)

    # -- internals --------------------------------------------------------------------------------
    def _post(self, sent: Sent[K]) -> Remote[K]:
        with self._lock:
            self._sent[sent.key] = sent
        self._send(sent)
        return Remote(self, sent.key)

    def _send(self, sent: Sent[K]) -> None:
        try:
            with self._send_lock:
                self.app.send_task(sent.task, args=sent.args, queue=sent.queue)
        except Exception as exc:  # noqa: BLE001 - broker faults differ per transport; sent again later
            self.log.error("%s: cannot send it to the broker: %s; will retry", sent.label, exc)
            sent.sent_at = time.monotonic() - self.resend_s + 1.0
            return
        sent.sent_at = time.monotonic()

    def _resend_due(self, sent: Sent[K], now: float) -> None:
        """A message no worker took yet: sent again ``resend_s`` after it was sent."""
        if now - sent.sent_at >= self.resend_s:
            self.log.warning("%s: no worker took it yet; sending it again", sent.label)
            self._send(sent)

    def _ended(self, key: K, code: int) -> None:
        with self._lock:
            self._exits[key] = code
        try:
            os.write(self._wake_w, b"!")
        except BlockingIOError:
            pass  # the supervisor is being woken already

    def _watch(self) -> None:
        while not self._stopped.wait(POLL_S):
            with self._lock:
                pending = [s for s in self._sent.values() if s.key not in self._exits]
            try:
                self._follow(pending)
            except Exception as exc:  # noqa: BLE001 - a store fault: logged, the next poll tries again
                self.log.error("celery: cannot follow what was sent to workers: %s", exc)

    def _follow(self, pending: list[Sent[K]]) -> None:
        raise NotImplementedError


class Remote(Generic[K]):
    """What a ``runner worker`` runs, as the supervisor sees it (``Handle``)."""

    pid = 0  # no process of this machine

    def __init__(self, broker: Broker[K], key: K):
        self._broker, self.key = broker, key

    @property
    def sentinel(self) -> int:
        return self._broker.wake_r

    def poll(self) -> int | None:
        return self._broker.exit_code(self.key)

    def signal_tree(self, sig: int) -> None:
        self._broker.stop(self.key, sig)

    def close(self) -> None:
        self._broker.forget(self.key)


class LostRunsTicker:
    """The ticker that asks ``launcher.lost`` every ``every`` seconds (serve's, and the watcher of
    ``runner kanban dispatch``): a run whose worker was lost ends ``unknown``, and the retry policy
    applies as for a failed run."""

    name = "lost-runs"

    def __init__(self, launcher: Launcher[Any], store: Store, log: logging.Logger, *, every: float):
        self.launcher, self.store, self.log, self.every = launcher, store, log, every
        self._next: datetime | None = None

    def tick(self, now: datetime) -> None:
        if self._next is not None and now < self._next:
            return
        self._next = now + timedelta(seconds=self.every)
        for run_id in self.launcher.lost(self.store, now):
            self.log.warning("run %s: its worker stopped sending heartbeats; marked unknown (worker_lost)", run_id)

    def next_wake(self, now: datetime) -> datetime | None:
        return self._next

    def close(self) -> None:
        return None


class CelerySpawner(Broker[str]):
    """serve's ``Launcher`` (``Spawner``) of runs on ``runner worker``s, and its ``RemoteExecutor``.
    ``app`` is the Celery app."""

    def __init__(
        self, *, app: Any, store: Store, resend_s: float, lost_after_s: float, log: logging.Logger, every: float = 1.0
    ):
        self.store, self.every = store, every
        self._hashes = HashCache()
        super().__init__(app, log, resend_s=resend_s, lost_after_s=lost_after_s, name="runner-celery-watch")

    # -- the RemoteExecutor protocol ----------------------------------------------------------------
    @property
    def spawner(self) -> CelerySpawner:
        return self

    def follow(self, pool: Pool, jobs: Mapping[str, Job]) -> int:
        """The pool follows the runs ``runner worker``s are running now (a previous leader sent them)."""
        from runner.clock import parse_iso, utcnow
        from runner.serve.fire import Fire
        from runner.serve.pool import RETRIED

        count = 0
        for row in ledger.running_on_workers(self.store, RETRIED):
            job = jobs.get(row.job)
            if job is None:
                continue  # it ends by itself; nothing to retry for a removed job
            fire = Fire(row.id, job, parse_iso(row.slot), row.trigger, int(row.attempt or 1), row.parent_run, row.task_id)
            pool.follow(fire, self.adopt(row.id, job.name, job.spec.queue), parse_iso(row.started_at) or utcnow())
            count += 1
        return count

    def tickers(self) -> list[Ticker]:
        return [LostRunsTicker(self, self.store, self.log, every=self.every)]

    def connect(self) -> None:
        """Open a broker connection now, so the first fire does not pay for it (a broker that is
        down is logged; sends retry)."""
        try:
            with self._send_lock, self.app.producer_pool.acquire(block=True) as producer:
                producer.connection.ensure_connection(max_retries=1)
        except Exception as exc:  # noqa: BLE001 - broker faults differ per transport
            self.log.error("cannot reach the broker yet: %s", exc)

    def spawn(self, spec: WorkerSpec) -> Remote[str]:
        digest = self._hashes.get(Path(spec.jobs_path), [Path(p) for p in spec.control_inputs])
        job, run_id = spec.job, spec.run_id
        return self._post(Sent(run_id, f"run {run_id} of {job.name}", TASK, [run_id, digest, job.name], job.spec.queue, 0.0))

    def tidy(self) -> None:
        """Nothing to retire here: the runs' processes belong to the workers."""

    def near(self) -> None:
        """Nothing to start here: the runs start on `runner worker`s, already running."""

    def prewarm(self, runs: int) -> None:
        """Nothing to start here: the workers have their own processes."""

    def adopt(self, run_id: str, job: str, queue: str) -> Remote[str]:
        """Follow a run a worker already holds (a previous leader sent it; never sent again)."""
        with self._lock:
            self._sent[run_id] = Sent(run_id, f"run {run_id} of {job}", TASK, [], queue, time.monotonic())
        return Remote(self, run_id)

    def stop(self, key: str, sig: int) -> None:
        """Ask the worker holding run ``key`` to stop it (SIGTERM: finish the step; SIGKILL: at once);
        a run no worker took yet ends ``interrupted`` here and is never started."""
        if ledger.drop_unclaimed(self.store, key):
            return
        ledger.request_stop(self.store, key, "kill" if sig == signal.SIGKILL else "term")

    def _follow(self, pending: list[Sent[str]]) -> None:
        if not pending:
            return
        rows = ledger.rows_of(self.store, [s.key for s in pending])
        now = time.monotonic()
        for sent in pending:
            row = rows.get(sent.key)
            if row is None or not row.active:  # queued, running or waiting on an approval: still the worker's
                ok = row is not None and row.status in (RunStatus.SUCCEEDED, RunStatus.SKIPPED)
                self._ended(sent.key, 0 if ok else 1)
            elif row.worker is None and sent.args:
                self._resend_due(sent, now)


def celery_executor(settings: Settings, store: Store, log: logging.Logger) -> CelerySpawner:
    from runner.dist.app import celery_app

    ex = settings.config.executor
    url = ex.broker_url()
    log.info("executor: celery (broker %s); runs go to runner worker processes", _safe(url))
    app = celery_app(url)
    spawner = CelerySpawner(
        app=app, store=store, resend_s=ex.resend_s, lost_after_s=ex.lost_after_s, log=log, every=ex.heartbeat_s
    )
    spawner.connect()
    return spawner


def _safe(url: str) -> str:
    """The broker URL without its password."""
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        rest = "***@" + rest.split("@", 1)[1]
    return f"{scheme}{sep}{rest}"
