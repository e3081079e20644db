"""``runner serve``: one long-lived process per RUNNER_HOME that runs the loops.

The daemon is a single-threaded loop over *tickers*. Each ticker has ``tick(now)`` (do what is
due), ``next_wake(now)`` (when it next wants to be called, or None) and ``close()``. The loop
calls every ticker, then sleeps until the earliest wake time, a worker exit, a signal or a
nudge from another thread, at most ``MAX_SLEEP_S``. Built in: reload (jobs.yaml changes), the
pool (workers), the schedule, the heartbeat. Other loops (the kanban dispatcher, the idle
Curator) are ``TickerFactory`` callables that receive a ``ServeHost`` (the settings, the store, the
clock, the log and ``wake()``); the composition root (``runner.cli.serve``) passes them in, so this
framework does not know which loops exist.

One instance per RUNNER_HOME: an ``flock`` on ``RUNNER_HOME/run/serve.lock`` (released by the
kernel when the process dies); a second serve exits 2 naming the pid that holds it. The lock file
holds the pid: ``runner serve reload`` sends it SIGHUP, which reloads jobs.yaml at once (and
lifts the reload hold a tampering run leaves).
"""

from __future__ import annotations

import fcntl
import logging
import logging.handlers
import math
import os
import select
import signal
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from multiprocessing.connection import wait
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.config.jobs import load_jobs
from runner.delivery.alerts import Event, Notice
from runner.delivery.background import BackgroundAlerts
from runner.errors import AlreadyRunning, RunnerError
from runner.host import secrets
from runner.safety.control import hold_path
from runner.serve.host import COMMIT_CHECK_S, Clock, ExecutorFactory, ServeHost, SystemClock, Ticker, TickerFactory
from runner.serve.leader import LeaseTicker
from runner.serve.logs import JsonFormatter, LogFile, LogFormat, stream_formatter, text_formatter
from runner.serve.notify import WatchdogTicker, sd_notify, watchdog_interval
from runner.serve.outage import StoreOutage
from runner.serve.pool import Paths, Pool
from runner.serve.schedule import ScheduleTicker
from runner.serve.state import heartbeat, register_serve
from runner.serve.watch import JobsWatcher, ReloadTicker
from runner.settings import Settings
from runner.store import Store, StoreFault, fault
from runner.store.dialect import Dialect
from runner.store.lease import SCHEDULER, lease_holder, open_lease

if TYPE_CHECKING:
    from runner.config.jobs import JobsFile
    from runner.delivery.alerts import Notice
    from runner.delivery.background import BackgroundAlerts
    from runner.serve.launcher import ForkLauncher
    from runner.serve.leader import LeaseTicker
    from runner.serve.pool import Pool
    from runner.serve.watch import JobsWatcher
    from runner.store.lease import Lease

MAX_SLEEP_S = 1.0  # the loop looks at the wall clock at least this often (clock jumps, sleep)
LOG_BYTES = 5_000_000
LOG_BACKUPS = 3


def _warm_once() -> None:
    """What a later term waits for instead of the forkserver's warm-up (done by the first)."""


# -- one instance per RUNNER_HOME ----------------------------------------------------------
def acquire_lock(home: Path) -> int:
    """Hold ``home/run/serve.lock`` for the life of the process; raise AlreadyRunning if held."""
    path = home / "run" / "serve.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise AlreadyRunning(f"runner serve is already running (pid {holder}) for {home}") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def serve_pid(home: Path) -> int | None:
    """The pid of the serve holding ``home``'s lock, or None when no serve runs there."""
    path = home / "run" / "serve.lock"
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.read(fd, 64).decode(errors="replace").strip()
            return int(text) if text.isdigit() else None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None  # nobody holds it
    finally:
        os.close(fd)


def _release_hold_at_start(home: Path, log: logging.Logger) -> None:
    """Starting serve is an operator's load of jobs.yaml: a reload hold left by a tampering run is
    cleared, loudly."""

    hold = hold_path(home)
    if hold.exists():
        why = hold.read_text(errors="replace").strip()
        log.warning("loading jobs.yaml although a run changed the control files (%s); hold cleared", why)
        hold.unlink(missing_ok=True)


def setup_logging(home: Path, level: str = "INFO", fmt: LogFormat = LogFormat.TEXT) -> logging.Logger:
    """serve logs to stderr and to a rotating ``RUNNER_HOME/logs/serve.log``: text with
    timestamps, or JSON lines (``fmt``); on stderr under journald, without timestamps
    (``runner.serve.logs``)."""
    log = logging.getLogger("runner.serve")
    log.setLevel(level.upper())
    log.propagate = False
    for handler in list(log.handlers):
        log.removeHandler(handler)
        handler.close()
    stream = logging.StreamHandler(sys.stderr)
    stream.setFormatter(stream_formatter(fmt, sys.stderr, os.environ))
    logs = home / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    rotating = LogFile(logs / "serve.log", maxBytes=LOG_BYTES, backupCount=LOG_BACKUPS)
    rotating.setFormatter(JsonFormatter() if fmt == LogFormat.JSON else text_formatter())
    for handler in (stream, rotating):
        log.addHandler(handler)
    return log


class HeartbeatTicker:
    name = "heartbeat"

    def __init__(self, store: Store, pool: Pool, every: float):
        self.store, self.pool, self.every = store, pool, every
        self._next: datetime | None = None

    def tick(self, now: datetime) -> None:
        if self._next is not None and now < self._next:
            return
        self.beat(now)

    def beat(self, now: datetime) -> None:
        """Write the heartbeat now (also serve's probe, during an outage, of whether the store can
        be written again)."""

        running, waiting = self.pool.counts()
        heartbeat(self.store, now=now, running=running, waiting=waiting)
        self._next = now + timedelta(seconds=self.every)

    def next_wake(self, now: datetime) -> datetime | None:
        return self._next

    def close(self) -> None:
        return None


class Checkpointer:
    """WAL checkpoints (they fsync) on a thread with its own connection, so a commit on serve's
    main loop never pays for one at the moment a slot fires. A checkpoint that fails (the disk is
    full, the file system read-only) is logged once and tried again at the next interval."""

    def __init__(self, path: Path, log: logging.Logger, every: float = 5.0):
        self.path, self.log, self.every = path, log, every
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="runner-checkpoint", daemon=True)

    def start(self) -> Checkpointer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        failing = False
        try:
            while not self._stopped.wait(self.every):
                try:
                    if conn is None:
                        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
                except sqlite3.Error as exc:
                    if not failing:
                        self.log.warning(
                            "WAL checkpoint of %s failed: %s; trying again every %.0fs", self.path, exc, self.every
                        )
                    failing = True
                    continue
                if failing:
                    self.log.info("WAL checkpoints of %s work again", self.path)
                    failing = False
        finally:
            if conn is not None:
                conn.close()


class Serve:
    def __init__(
        self,
        settings: Settings,
        *,
        clock: Clock | None = None,
        loops: Sequence[TickerFactory] = (),
        log_level: str = "INFO",
        log_format: LogFormat = LogFormat.TEXT,
        executor: ExecutorFactory | None = None,
    ):
        self.settings = settings
        self.log_format = log_format
        self.clock = clock or SystemClock()
        self.loops = list(loops)
        self.executor = executor  # None: runs execute as serve's own worker processes
        self.log_level = log_level
        self._stops = 0  # SIGTERM/SIGINT received; a second one hurries the shutdown
        self._hup = False
        self._lease_lost = False
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def wake(self) -> None:
        try:
            os.write(self._wake_w, b"!")
        except BlockingIOError:
            return  # the pipe is full: the loop is already being woken

    def _lost_lease(self) -> None:
        self._lease_lost = True

    def _lead(self, store: Store, ttl: float, log: logging.Logger) -> Lease | None:
        """Take the scheduler lease, standing by while another serve holds it; None when a
        signal stopped serve first."""

        lease = open_lease(store, SCHEDULER, ttl, log=log)
        announced = False
        while not self._stops:
            try:
                # the store's own connection first: one that sat idle through a database restart
                # is opened again here, not by the first write of the term we may be about to start
                store.one("SELECT 1")
                taken = lease.acquire()
            except StoreFault as exc:  # the store is restarting, unreachable, locked, its disk full: stand by
                if not exc.transient:
                    raise
                log.error("standing by: the store cannot answer: %s", exc)
                taken, announced = False, True
            if taken:
                if announced:
                    log.info("took the scheduler lease: this serve leads now")
                return lease
            if not announced:
                holder = lease_holder(store)
                who = f"{holder.host} (pid {holder.pid})" if holder else "another serve"
                log.info("standing by: %s leads; taking over within %.0fs of it stopping", who, ttl)
                announced = True
            wait([self._wake_r], min(1.0, ttl / 10))
            try:
                while os.read(self._wake_r, 4096):
                    pass
            except BlockingIOError:
                pass  # drained
        return None

    def _on_signal(self, signum: int, frame: Any) -> None:
        if signum == signal.SIGHUP:
            self._hup = True
        else:
            self._stops += 1

    def run(self) -> int:
        from runner.serve.launcher import ForkLauncher

        s = self.settings
        s.ensure_home()
        lock = acquire_lock(s.home)
        # from here a signal only sets a flag: SIGTERM during start-up stops cleanly, SIGHUP reloads
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
        old_wakeup = signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        log = setup_logging(s.home, self.log_level, self.log_format)
        config = s.config
        idle = config.serve.forkserver_idle_s
        launcher = ForkLauncher(config_path=s.config_path, max_runs=config.serve.worker_max_runs, idle_s=idle)
        # the forkserver imports the worker while we load jobs (runs due at the start, catch-ups and
        # adopted rows, find it ready); with ``idle`` it stops once nothing is near, and starts again ahead
        warmed = launcher.warm()
        try:
            jobs = load_jobs(s.jobs_path, default_timezone=config.timezone, own_tools=s.own_tool_names)
        except BaseException:
            launcher.close()
            raise
        _release_hold_at_start(s.home, log)
        store = s.store  # opening it marks rows of dead workers `unknown`
        try:
            while True:
                lease = self._lead(store, config.serve.lease_s, log)
                if lease is None:  # stopped while standing by
                    log.info("serve stopped (it was standing by)")
                    return 0
                self._lease_lost = False
                self._term(store, lease, jobs, launcher, warmed, log)
                if not self._lease_lost:
                    log.info("serve stopped")
                    return 0
                # another serve leads now (this one was paused, or lost its connection to the store
                # while the other took the lease): stand by, and lead again when it stops
                log.warning("stepped down: another serve holds the scheduler lease; standing by")
                warmed = _warm_once
                try:
                    jobs = load_jobs(s.jobs_path, default_timezone=config.timezone, own_tools=s.own_tool_names)
                except RunnerError as exc:
                    log.error("cannot load %s (%s); the next term keeps the jobs loaded before", s.jobs_path, exc)
        finally:
            launcher.close()  # the forkserver exits; workers it forked were reaped by the term
            signal.set_wakeup_fd(old_wakeup)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            os.close(lock)

    def _term(
        self,
        store: Store,
        lease: Lease,
        jobs: JobsFile,
        launcher: ForkLauncher,
        warmed: Callable[[], None],
        log: logging.Logger,
    ) -> None:
        """Lead the schedule with ``lease`` until a signal stops serve or another serve takes the
        lease (``_lease_lost``), then stop what leading started: the pool's workers, the loops, the
        watcher, the heartbeat. The lease is released unless it was lost."""
        from runner.mcp.keep import Bridges

        s = self.settings
        config = s.config
        checkpointer: Checkpointer | None = None
        if store.dialect is Dialect.SQLITE:  # PostgreSQL checkpoints by itself
            store.execute("PRAGMA wal_autocheckpoint=0")
            checkpointer = Checkpointer(store.path, log).start()
        schedule: ScheduleTicker | None = None
        alerts = BackgroundAlerts(store.path, config, home=s.home, base_dir=jobs.base_dir, log=log)
        remote = self.executor(s, store, log) if self.executor is not None else None
        pool = Pool(
            store=store,
            spawner=remote.spawner if remote is not None else launcher,
            remote=remote is not None,
            clock=self.clock,
            log=log,
            paths=Paths(str(s.home), str(s.jobs_path), str(s.config_path)),
            max_parallel=config.serve.max_parallel,
            kill_grace=config.serve.kill_grace,
            on_pause=lambda name, why: schedule.mark_paused(name, why) if schedule else None,
            alerts=alerts,
            bridges=Bridges(s.home, s.config_path, secrets.getenv, log),
        )
        schedule = ScheduleTicker(store=store, pool=pool, log=log, check=COMMIT_CHECK_S)
        warmed()
        now = self.clock.now()
        register_serve(store, jobs_path=str(jobs.path), heartbeat_s=config.serve.heartbeat_s, now=now)
        adopted = pool.adopt(jobs.jobs)
        if remote is not None:
            adopted += remote.follow(pool, jobs.jobs)
        else:
            adopted += pool.adopt_running(jobs.jobs)
        schedule.set_jobs(jobs.jobs, now)
        watcher = JobsWatcher(
            jobs.path, default_timezone=config.timezone, current=jobs, wake=self.wake, settings=s
        ).start()
        host = ServeHost(s, store, self.clock, log, self.wake, forks=launcher.forks, jobs=schedule.all_jobs)
        leader = LeaseTicker(lease, config.serve.lease_s, log, self._lost_lease)
        beat = HeartbeatTicker(store, pool, config.serve.heartbeat_s)
        tickers: list[Ticker] = [
            leader,
            ReloadTicker(watcher, schedule, log, s.home, alerts=alerts),
            pool,
            schedule,
            beat,
        ]
        if remote is not None:
            tickers.extend(remote.tickers())
        tickers.extend(factory(host) for factory in self.loops)
        watchdog = watchdog_interval()
        if watchdog is not None:
            tickers.append(WatchdogTicker(watchdog))
        log.info(
            "serve started: pid %d, %d jobs from %s, max_parallel %d%s",
            os.getpid(),
            len(jobs.jobs),
            jobs.path,
            config.serve.max_parallel,
            f", {adopted} queued runs adopted" if adopted else "",
        )
        sd_notify(f"READY=1\nSTATUS=firing {len(jobs.jobs)} jobs\nMAINPID={os.getpid()}")
        try:
            self._loop(tickers, pool, watcher, leader, store, alerts, beat.beat)
            if self._lease_lost:
                sd_notify("STATUS=stepping down: another serve leads")
            else:
                sd_notify("STOPPING=1\nSTATUS=stopping: waiting for running workers")
            log.info("stopping: no new fires; stopping %d running worker(s)", len(pool.active()))
            pool.shutdown(config.serve.shutdown_grace, hurry=lambda: self._stops > 1)
        finally:
            for ticker in tickers:
                if ticker is not pool:
                    ticker.close()
            pool.close()
            if pool.bridges is not None:
                pool.bridges.close()  # the keep-alive MCP servers stop with serve
            if remote is not None:
                remote.close()
            alerts.close(config.serve.shutdown_grace)
            if checkpointer is not None:
                checkpointer.stop()
            # a standby takes over at once (a lost lease: nothing of ours to delete, the connection
            # of a PostgreSQL lease is closed); a store that cannot answer: the lease runs out
            _logged(log, "release the scheduler lease", lease.release)
            _logged(
                log,
                "write the last heartbeat",
                lambda: heartbeat(store, now=self.clock.now(), running=0, waiting=0, stopped=True),
            )

    def _loop(
        self,
        tickers: list[Ticker],
        pool: Pool,
        watcher: JobsWatcher,
        leader: LeaseTicker,
        store: Store,
        alerts: BackgroundAlerts,
        probe: Callable[[datetime], None],
    ) -> None:
        """The tickers, round after round. A round that meets a transient store fault is retried
        (``StoreOutage``); during an outage a round also writes the heartbeat (``probe``), so the
        store is said to answer again only once it can be written, not after a round that
        happened to need no write."""

        log = logging.getLogger("runner.serve")
        outage = StoreOutage(log, lambda exc, lasted: alerts.notice(store_notice(exc, lasted)))
        while not self._stops:
            if self._hup:
                self._hup = False
                watcher.poke()
            now = self.clock.now()
            began = time.monotonic()
            try:
                for ticker in tickers:
                    ticker.tick(now)
                    if self._lease_lost:
                        return  # another serve leads now: fire nothing more
                if outage.ongoing:
                    probe(now)
            except sqlite3.OperationalError as exc:
                fault = transient_fault(exc, Path(store.shown))
                if fault is None:
                    raise
                outage.failed(fault, began)  # the next round tries again (outage.retry_s)
                leader.recheck()  # the lease's connection may have gone too: renew before firing again
                _enforce(pool, Path(store.shown))
            else:
                outage.answered()
            wakes = [w for t in tickers if (w := t.next_wake(now)) is not None]
            timeout = MAX_SLEEP_S
            if outage.ongoing:
                timeout = outage.retry_s  # what was due is still due: not sooner than the retry
            elif wakes:
                timeout = min(timeout, max(0.0, (min(wakes) - self.clock.now()).total_seconds()))
            _sleep([self._wake_r, *pool.sentinels()], timeout)
            try:
                while os.read(self._wake_r, 4096):
                    pass
            except BlockingIOError:
                pass  # drained


def _sleep(fds: list[int], timeout: float) -> None:
    """Until one of ``fds`` is readable (a wake, a signal, a worker's news) or ``timeout`` seconds
    pass. ``select.poll`` itself: serve's idle loop comes here 10 times a second, and
    ``multiprocessing.connection.wait`` builds a Python selector object each time."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    poller.poll(math.ceil(timeout * 1000))


def _enforce(pool: Pool, path: Path) -> None:
    """Timeouts hold while the store cannot answer (stopping a remote run writes to the store: a
    fault there waits for the next round)."""
    try:
        pool.enforce()
    except sqlite3.OperationalError as exc:
        if transient_fault(exc, path) is None:
            raise


def transient_fault(exc: sqlite3.OperationalError, path: Path) -> StoreFault | None:
    """``exc`` as the transient store fault serve rides out, or None (a bug, or a damaged file:
    serve stops). ``path``: the SQLite file, named by a fault raised outside the store's guard."""

    if isinstance(exc, StoreFault):
        return exc if exc.transient else None
    converted = fault(path, exc)
    return converted if converted is not None and converted.transient else None


def store_notice(exc: StoreFault, lasted: float) -> Notice:
    return Notice(
        Event.STORE_UNAVAILABLE,
        str(exc),
        key=f"serve:store_unavailable:{int(time.time())}",
        note=f"serve cannot use its store for {lasted:.0f} s; nothing fires until it can (it keeps retrying)",
        hint="runner doctor",
    )


def _logged(log: logging.Logger, what: str, action: Callable[[], None]) -> None:
    """At shutdown: ``action``, a store fault logged in one line instead of ending serve with a traceback."""
    try:
        action()
    except StoreFault as exc:
        log.error("cannot %s: %s", what, exc)


def run_serve(
    settings: Settings,
    *,
    loops: Sequence[TickerFactory] = (),
    log_level: str = "INFO",
    log_format: LogFormat = LogFormat.TEXT,
    executor: ExecutorFactory | None = None,
) -> int:
    """Run serve until SIGTERM/SIGINT with ``loops`` beside the built-in tickers; ``executor``:
    where runs execute when not as serve's own worker processes (``runner.dist``)."""
    return Serve(settings, loops=loops, log_level=log_level, log_format=log_format, executor=executor).run()
