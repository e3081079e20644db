"""Worker processes forked from a warm forkserver: an agent run's is its own; script-only runs go
to reusable workers (``runner.serve.reuse``) when ``serve.worker_max_runs`` > 1.

serve starts the warm forkserver (``runner.run.forks``) with itself and again when a run is near,
and stops it when it has been idle (``serve.forkserver_idle_s``; null: it runs for serve's life); it imports ``runner.serve.prefork`` (the
heavy modules and one-time setup every worker needs) a single time, and each run is a ``fork()``
of it running ``worker_main``: no interpreter start, no import, no ``multiprocessing`` bootstrap.
The forkserver is a fresh interpreter that never held serve's lock, its SQLite connection or its
threads; the kanban dispatcher inside serve starts its workers from the same one.

A worker makes itself a process-group leader; stopping one sends the signal to its group and
to every descendant's group (backend commands run in sessions of their own), remembering the
descendants so a later SIGKILL also reaches children orphaned in between.

The worker records when it took its run (``dispatched_at``: its first moment, right after the
fork) and how long the run waited for a slot (``waited_s``) with its ``started_at``, in one
write: serve's loop writes nothing per start, and the ledger tells the queue wait
(``dispatched_at - created_at``: a free slot, then the forkserver's turn) from the worker's start
overhead (``started_at - dispatched_at``).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from runner.clock import iso, utcnow
from runner.config.database import ENV, PG_SCHEMES
from runner.config.jobfile import Job
from runner.config.machine import load_config
from runner.errors import RunnerError, StoreError, failure_reason
from runner.host import secrets
from runner.host.procs import ProcessTree, become_subreaper, install_two_stage_stop
from runner.run.cancel import CancelWatcher
from runner.run.execute import execute
from runner.run.forks import LOST_EXIT, Handle, Launcher, Spawn, Warm, WarmForks, WorkerHandle
from runner.run.request import Handoff, RunRequest
from runner.settings import Settings
from runner.statuses import RunStatus, Trigger
from runner.store import ledger
from runner.store.control import Vars

PRELOAD = ("runner.serve.prefork",)
WORKER = "runner.serve.launcher:worker_main"

if TYPE_CHECKING:
    from runner.config.machine import Config
    from runner.store import Store
    from runner.store.dialect import Target


class ConfigCache:
    """config.yaml as the forkserver parsed it (with serve's keys held, as each worker holds them):
    a worker reuses it while the file is the same (inode, size, mtime and ctime unchanged), so a
    run does not parse and validate config.yaml again; a changed file is read afresh."""

    def __init__(self) -> None:
        self._entry: tuple[tuple[int, ...], Config] | None = None

    @staticmethod
    def _key(path: Path) -> tuple[int, ...] | None:
        try:
            st = path.stat()
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def load(self, path: Path) -> None:
        key = self._key(path)
        if key is not None:
            self._entry = (key, load_config(path))

    def config_for(self, path: Path) -> Config | None:
        """The parsed config of ``path`` if the file is unchanged since it was parsed, else None."""
        if self._entry is None or self._key(path) != self._entry[0]:
            return None
        return self._entry[1]

    def database(self) -> str | None:
        """config.yaml's ``database:`` as parsed (None when not loaded or not set)."""
        return self._entry[1].database if self._entry is not None else None

    def clear(self) -> None:
        self._entry = None


CONFIG = ConfigCache()  # filled in the forkserver by ``preload_config``; empty anywhere else


def preload_config(path: str, held: dict[str, str]) -> None:
    """A set-up call the forkserver runs once, before it forks any worker."""

    secrets.install(held)  # the env fallback provider is built from the keys a worker holds
    CONFIG.load(Path(path))
    preload_store_driver(CONFIG.database())


def preload_store_driver(setting: str | None) -> None:
    """With the store on PostgreSQL (``RUNNER_DATABASE_URL``, else config.yaml's ``database:``),
    import its driver once here rather than in every worker (psycopg: ~0.1 s a start, which
    otherwise lands between serve's dispatch, where a run's timeout starts, and its start)."""

    url = os.environ.get(ENV, "").strip() or (setting or "")
    if url.split("://", 1)[0].lower() in PG_SCHEMES:
        import runner.store.pg  # noqa: F401


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs, pickled to the forked child (the job travels whole, so the
    worker never re-reads jobs.yaml)."""

    home: str
    jobs_path: str
    config_path: str
    job: Job
    run_id: str
    trigger: Trigger
    slot: datetime | None = None
    task_id: str | None = None
    vars: Vars = ()  # a trigger's template variables (``runner jobs trigger --var``)
    control_inputs: tuple[str, ...] = ()  # the files jobs.yaml refers to (the run protects them)
    waited_s: float | None = None  # how long it waited for a slot (None: not recorded)


class Spawner(Launcher[WorkerSpec], Protocol):
    """serve's launcher: the pool's seam."""

    def tidy(self) -> None:
        """Called on every pass of serve's loop: retire what has been idle too long."""

    def prewarm(self, runs: int) -> None:
        """``runs`` script-only runs are due within seconds: have workers ready for them."""

    def near(self) -> None:
        """A run is due within ``NEAR`` (or waits to start): have what starts workers ready by then."""


class ForkLauncher:
    """Starts workers from the warm forkserver (``forks``; serve's own unless given one)."""

    def __init__(
        self,
        preload: tuple[str, ...] = PRELOAD,
        *,
        config_path: Path | None = None,
        forks: WarmForks | None = None,
        max_runs: int = 1,
        idle_s: float | None = None,
    ):
        """``preload``: modules the forkserver imports first (default ``runner.serve.prefork``);
        ``config_path``: the config.yaml it parses once for every worker; ``max_runs``: how many
        script-only runs one worker process takes (``serve.worker_max_runs``; 1: a process per run);
        ``idle_s``: stop the forkserver once it has had no worker and no run near for this long
        (``serve.forkserver_idle_s``; started again by ``near`` or the next spawn); None: it runs
        until ``close``."""
        from runner.serve.reuse import Shelf

        setup: tuple[tuple[str, tuple[Any, ...]], ...] = (
            ()
            if config_path is None
            else (("runner.serve.launcher:preload_config", (str(config_path), secrets.held())),)
        )
        if max_runs > 1:  # reusable workers warm up from a kit made once
            setup += (("runner.serve.reuse:prepare_warm_up", ()),)
        self.forks = forks or WarmForks(Warm(modules=tuple(preload), setup=setup))
        self.shelf = Shelf(self.forks, max_runs) if max_runs > 1 else None
        self.idle_s = idle_s

    def warm(self) -> Callable[[], None]:
        """Start the forkserver now; return a function that waits until it has imported everything."""
        self.forks.start()  # returns at once; the server imports the preload in the background
        return self.forks.ready

    def spawn(self, spec: WorkerSpec) -> Handle:
        """Ask the forkserver for the worker and return at once: serve does not wait for the fork.
        A script-only run goes to a reusable worker (runner.serve.reuse) when ``max_runs`` > 1."""

        # the keys travel in the pickled arguments (a socket), never in an environment block
        if self.shelf is not None and not spec.job.spec.agent:
            return self.shelf.spawn(spec, secrets.held())
        ticket = self.forks.submit(Spawn(WORKER, (spec, secrets.held())))
        return WorkerHandle(self.forks, ticket)

    def lost(self, store: Store, now: datetime) -> list[str]:
        return ledger.recover_orphans(store)

    def tidy(self) -> None:
        if self.shelf is not None:
            self.shelf.tidy()
        if self.idle_s is not None:
            self.forks.stop_if_idle(self.idle_s)

    def prewarm(self, runs: int) -> None:
        if self.shelf is not None:
            self.shelf.prewarm(runs, secrets.held())

    def near(self) -> None:
        """A run is near: the forkserver is started now if it was stopped (its imports take about
        a second, done in the background), and not stopped while the run is still to come."""
        self.forks.ensure()

    def close(self) -> None:
        if self.shelf is not None:
            self.shelf.close()
        self.forks.close()


class AdoptedHandle:
    """A run's process that a previous serve on this host started and left running when it died
    (kill -9): this serve follows it by pid and start time (``Handle``), so the job's timeout and
    overlap policy still hold. Its exit code is unknown (not this serve's child): ``LOST_EXIT``."""

    def __init__(self, pid: int, start: str | None):
        self._pid = pid
        self._tree = ProcessTree(pid, start=start)
        self._fd = os.pidfd_open(pid)  # readable once the process has ended

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def sentinel(self) -> int:
        return self._fd

    def poll(self) -> int | None:
        return None if self._tree.alive() else LOST_EXIT

    def signal_tree(self, sig: int) -> None:
        self._tree.signal(sig)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def worker_main(spec: WorkerSpec, held: dict[str, str] | None = None) -> None:
    """The body of a worker process: one ``execute`` of a queued ledger row.

    First SIGTERM/SIGINT: finish the current step, start nothing new; a second one stops at
    once. A problem found before the run starts (broken template, no model) is recorded on the
    queued row, so the ledger always says why.
    """

    handed = utcnow()  # the worker has its run: what follows is start overhead
    if held:
        secrets.install(held)
    stop = threading.Event()
    install_two_stage_stop(stop)
    become_subreaper()  # what the run's commands leave behind ends with the run
    sys.exit(run_spec(spec, stop, handed))


class Kept:
    """What a reusable worker keeps from one run to the next: the runs' store, open, and a cancel
    watcher (a thread and its connection) on it, so a run neither opens and checks the store nor
    starts and ends a watcher of its own. A run that did not succeed gives the store up (the next
    run opens it afresh: a connection that failed stays with the run it failed), and so does a
    SQLite file that is no longer the one opened (moved aside or restored). Ended with the worker
    (``close``)."""

    def __init__(self) -> None:
        self._store: Store | None = None
        self._where: tuple[Any, ...] = ()
        self._cancels: CancelWatcher | None = None

    def store(self, settings: Settings) -> Store:
        """The store ``settings`` name, opened once (serve created and migrated it)."""
        where = _identity(settings.database)
        if self._store is None or where != self._where:
            self.drop_store()
            self._store, self._where = settings.open_store(migrate=False), where
        return self._store

    def cancels(self, store: Store) -> CancelWatcher:
        """The watcher on ``store`` (a run whose store is elsewhere gets a new one)."""

        if self._cancels is None or self._cancels.path != store.path:
            if self._cancels is not None:
                self._cancels.close()
            self._cancels = CancelWatcher(store.path)
        return self._cancels

    def after(self, exit_code: int) -> None:
        """A run ended: the store is closed unless it succeeded; connections its threads opened close."""
        if self._store is None:
            return
        if exit_code != 0:
            self.drop_store()
        else:
            self._store.close_others()

    def drop_store(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store, self._where = None, ()

    def close(self) -> None:
        self.drop_store()
        if self._cancels is not None:
            self._cancels.close()
            self._cancels = None


def _identity(target: Target) -> tuple[Any, ...]:
    """What tells one store from another: a PostgreSQL URL, or a SQLite file's path and inode."""
    if target.path is None:
        return ("url", str(target.url))
    try:
        st = os.stat(target.path)
    except OSError:
        return ("missing", str(target.path))
    return ("file", str(target.path), st.st_dev, st.st_ino)


def run_spec(spec: WorkerSpec, stop: threading.Event, handed: datetime, kept: Kept | None = None) -> int:
    """``execute`` the queued row ``spec`` names in this process (its store opened here and closed
    after); returns the exit code. ``handed``: when this process took the run; ``kept``: what a
    reusable worker keeps across its runs."""

    config_path = Path(spec.config_path)
    settings = Settings(
        home=Path(spec.home),
        jobs_path=Path(spec.jobs_path),
        config_path=config_path,
        loaded_config=CONFIG.config_for(config_path),
    )
    # serve has created and migrated the store, and it watches its own workers: open it plainly
    settings = settings.replace(
        opened_store=settings.open_store(migrate=False) if kept is None else kept.store(settings)
    )
    # the queued row exists (serve wrote it, with the task id if any): the run starts that row
    req = RunRequest(
        job=spec.job,
        trigger=Trigger(spec.trigger),
        run_id=spec.run_id,
        slot=spec.slot,
        vars_override=dict(spec.vars),
        stop=stop,
        control_inputs=spec.control_inputs,
        handoff=Handoff(handed, spec.waited_s),
        cancels=None if kept is None else kept.cancels(settings.store),
    )
    code = 1
    try:
        code = execute(settings, req).exit_code
    except RunnerError as exc:
        _record_failure(settings, spec, exc, handed)
        code = exc.exit_code
    finally:
        if kept is None:
            settings.store.close()
        else:
            kept.after(code)
    return code


def _record_failure(settings: Settings, spec: WorkerSpec, exc: RunnerError, handed: datetime) -> None:
    """A problem found before the run started: the queued row says why (with the hand-off time)."""

    print(f"runner worker {spec.run_id}: {exc}", file=sys.stderr)
    try:
        ledger.finish(
            settings.store,
            spec.run_id,
            RunStatus.FAILED,
            reason=failure_reason(exc),
            error=str(exc),
            dispatched_at=iso(handed),
            waited_s=spec.waited_s,
        )
    except StoreError as again:  # the disk is still full: serve records the worker's exit instead
        print(f"runner worker {spec.run_id}: cannot record the failure: {again}", file=sys.stderr)
