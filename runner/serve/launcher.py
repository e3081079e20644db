"""Worker processes: every run is its own process, forked from a warm forkserver.

serve starts a ``multiprocessing`` forkserver once; it imports ``runner.serve.prefork`` (the heavy
modules and one-time setup every worker needs) a single time, and each run is a ``fork()`` of it, so a fire costs milliseconds, not an interpreter start. The
forkserver never holds serve's lock, its SQLite connection or its threads. (As with any
multiprocessing start method but fork, a script that embeds serve needs the usual
``if __name__ == "__main__":`` guard; ``runner`` and ``python -m runner`` have it.)

A worker makes itself a process-group leader; stopping one sends the signal to its group and
to every descendant's group (backend commands run in sessions of their own), remembering the
descendants so a later SIGKILL also reaches children orphaned in between.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from runner.config.jobs import Job
from runner.procs import ProcessTree, become_subreaper, install_two_stage_stop
from runner.statuses import RunStatus, Trigger


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
    control_inputs: tuple[str, ...] = ()  # the files jobs.yaml refers to (the run protects them)


class Handle(Protocol):
    """A started worker, as the pool sees it."""

    @property
    def pid(self) -> int: ...

    @property
    def sentinel(self) -> int: ...

    def poll(self) -> int | None: ...

    def signal_tree(self, sig: int) -> None: ...

    def close(self) -> None: ...


class Spawner(Protocol):
    def spawn(self, spec: WorkerSpec) -> Handle: ...


class Launcher:
    """Starts workers from a forkserver that preloaded ``runner.serve.prefork`` (its ``MODULES``)."""

    def __init__(self, preload: list[str] | None = None):
        """``preload``: modules the forkserver imports first (default ``runner.serve.prefork``)."""
        self._ctx = multiprocessing.get_context("forkserver")
        self._ctx.set_forkserver_preload(["runner.serve.prefork"] if preload is None else list(preload))

    def warm(self) -> Callable[[], None]:
        """Start the forkserver now; return a function that waits until it has imported everything."""
        from multiprocessing import forkserver

        forkserver.ensure_running()  # returns at once; the server imports the preload in the background

        def ready() -> None:
            proc = self._ctx.Process(target=_noop, name="runner-warmup")
            proc.start()  # answered once the preload is done
            proc.join()
            proc.close()

        return ready

    def spawn(self, spec: WorkerSpec) -> WorkerHandle:
        from runner import secrets

        # the keys travel in the pickled arguments (a socket), never in an environment block
        proc = self._ctx.Process(target=worker_main, args=(spec, secrets.held()), name=f"runner-{spec.job.name}")
        proc.start()
        return WorkerHandle(proc)


class WorkerHandle:
    def __init__(self, proc: Any):
        self._proc = proc
        self._pid: int = proc.pid
        self._sentinel: int = proc.sentinel
        self._tree = ProcessTree(proc.pid)

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def sentinel(self) -> int:
        return self._sentinel

    def poll(self) -> int | None:
        """Exit code once the worker has ended (negative: killed by that signal)."""
        code: int | None = self._proc.exitcode
        return code

    def signal_tree(self, sig: int) -> None:
        """Send ``sig`` to the worker, its group, and every descendant and its group (never serve's)."""
        self._tree.signal(sig)

    def close(self) -> None:
        self._proc.join(0)
        self._proc.close()


def _noop() -> None:
    return None


def worker_main(spec: WorkerSpec, held: dict[str, str] | None = None) -> None:
    """The body of a worker process: one ``execute`` of a queued ledger row.

    First SIGTERM/SIGINT: finish the current step, start nothing new; a second one stops at
    once. A problem found before the run starts (broken template, no model) is recorded on the
    queued row, so the ledger always says why.
    """
    os.setpgid(0, 0)
    if held:
        from runner import secrets

        secrets.install(held)
    stop = threading.Event()
    install_two_stage_stop(stop)
    become_subreaper()  # what the run's commands leave behind ends with the run
    from runner.errors import RunnerError, StoreError, failure_reason
    from runner.run.execute import execute
    from runner.run.request import RunRequest
    from runner.settings import Settings
    from runner.statuses import Trigger
    from runner.store import Store
    from runner.store.runs import finish_run

    settings = Settings(home=Path(spec.home), jobs_path=Path(spec.jobs_path), config_path=Path(spec.config_path))
    # serve has created and migrated the store, and it watches its own workers: open it plainly
    settings.store = Store.open(settings.home / "runner.db", migrate=False)
    # the queued row exists (serve wrote it, with the task id if any): the run starts that row
    req = RunRequest(
        job=spec.job,
        trigger=Trigger(spec.trigger),
        run_id=spec.run_id,
        slot=spec.slot,
        stop=stop,
        control_inputs=spec.control_inputs,
    )
    try:
        outcome = execute(settings, req)
    except RunnerError as exc:
        print(f"runner worker {spec.run_id}: {exc}", file=sys.stderr)
        try:
            finish_run(settings.store, spec.run_id, RunStatus.FAILED, reason=failure_reason(exc), error=str(exc))
        except StoreError as again:  # the disk is still full: serve records the worker's exit instead
            print(f"runner worker {spec.run_id}: cannot record the failure: {again}", file=sys.stderr)
        sys.exit(exc.exit_code)
    sys.exit(outcome.exit_code)
