"""The dispatcher: hands ready tasks to worker processes.

One ``tick(now)``: notice workers that exited, promote todo -> ready, reclaim expired leases
(killing the stale worker's process group when it is still alive on this host), then claim
ready tasks by priority then age, up to ``kanban.max_workers`` running on this host, and start
a worker for each with ``HERMES_KANBAN_TASK`` and ``HERMES_KANBAN_FENCE`` in its environment and
its output appended to ``RUNNER_HOME/logs/kanban/<task>.log``. The worker is forked from a warm
forkserver (``TaskForkLauncher``: ``runner.run.forks``, the modules of a run already imported), which
does what ``runner kanban work`` does; ``ProcessLauncher`` starts ``python -m runner kanban work``.
Both are the ``runner.run.forks.Launcher`` seam serve's pool starts its runs through.

``runner serve`` ticks the dispatcher from its loop and ``runner kanban dispatch`` runs ``run(stop)``;
both use ``Changes``: a tick every ``kanban.poll_seconds``, and as soon as another process
commits to runner.db (``PRAGMA data_version``, looked at every 50 ms; 100 ms in serve) or a worker exits, so a
new task starts within a fraction of a second. serve's workers fork from serve's own forkserver.
Workers run in their own sessions and outlive the dispatcher; a restarted dispatcher counts
them from the board.

Under ``executor: celery`` the composition root passes ``runner.dist.kanban_remote``'s launcher
instead: each attempt is sent to a ``runner worker`` (its handle has pid 0: nothing here attaches
or signals it) and ``max_workers`` counts the attempts this host's dispatchers claimed, wherever
they run (the ``Capacity`` seam; ``HostCapacity`` counts the tasks running on this host).

A Dispatcher uses ``settings.store``'s connection unless given a ``board``; a caller that ticks
it from a thread of its own should pass ``board=Board(Store.open(path))`` for that thread.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from runner.clock import iso, utcnow
from runner.errors import RunnerError
from runner.host import secrets
from runner.host.procs import HOST, ProcessTree, kill_tree, start_time
from runner.run.forks import Handle, Launcher, Spawn, Warm, WarmForks, WorkerHandle
from runner.settings import Settings
from runner.store import ledger
from runner.store.board import Board
from runner.store.tasks import Claim, FenceError, Reclaimed

if TYPE_CHECKING:
    from runner.kanban.work import Assignment
    from runner.store import Store

ENV_TASK = "HERMES_KANBAN_TASK"
ENV_FENCE = "HERMES_KANBAN_FENCE"
WAKE_CHECK_S = 0.05
PRELOAD = ("runner.serve.prefork",)  # what a run imports (its modules), by name: no import edge
WORKER = "runner.kanban.work:forked_main"


class Capacity(Protocol):
    """How many running attempts count against ``kanban.max_workers``."""

    def running(self, board: Board) -> int: ...


class HostCapacity:
    """Local workers: the tasks running on this host (a restarted dispatcher counts them too)."""

    def running(self, board: Board) -> int:
        return board.running_on(board.host)


@dataclass(frozen=True)
class Started:
    task_id: int
    fence: int
    pid: int  # 0: sent to a ``runner worker`` (executor: celery), no process of this machine


@dataclass(frozen=True)
class Exited:
    task_id: int
    fence: int
    code: int
    task_status: str | None  # where the failed attempt sent the task; None if the worker had ended it


@dataclass(frozen=True)
class DispatchTick:
    promoted: tuple[int, ...] = ()
    reclaimed: tuple[Reclaimed, ...] = ()
    exited: tuple[Exited, ...] = ()
    started: tuple[Started, ...] = ()
    failed_to_start: tuple[tuple[int, str], ...] = ()
    running: int = 0

    @property
    def busy(self) -> bool:
        return bool(self.promoted or self.reclaimed or self.exited or self.started or self.failed_to_start)


def log_path(home: Path, task_id: int) -> Path:
    return home / "logs" / "kanban" / f"{task_id}.log"


class Process(subprocess.Popen[bytes]):
    """``python -m runner kanban work`` as a ``Handle`` (its sentinel: a pidfd)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.sentinel = os.pidfd_open(self.pid)

    def signal_tree(self, sig: int) -> None:
        ProcessTree(self.pid).signal(sig)

    def close(self) -> None:
        os.close(self.sentinel)


class LocalLaunchers:
    """What the local launchers share: a worker gone without a trace is one of this host's orphans."""

    def lost(self, store: Store, now: datetime) -> list[str]:
        return ledger.recover_orphans(store)


@dataclass
class ProcessLauncher(LocalLaunchers):
    """Starts ``python -m runner kanban work`` in a new session (its own process group)."""

    settings: Settings
    python: str = sys.executable

    def spawn(self, claim: Claim) -> Process:
        home = self.settings.home
        path = attempt_header(home, claim)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        with os.fdopen(fd, "ab", buffering=0) as log:
            # the held keys go to the worker through an inherited fd, never its environment block
            env, keys_fd = secrets.child_env(
                {ENV_TASK: str(claim.task_id), ENV_FENCE: str(claim.fence), "PYTHONUNBUFFERED": "1"}
            )
            argv = [self.python, "-m", "runner", "--home", str(home), "--jobs", str(self.settings.jobs_path)]
            if self.settings.config_given or self.settings.config_path.exists():  # else none, as here
                argv += ["--config", str(self.settings.config_path)]
            argv += ["kanban", "work"]
            try:
                return Process(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                    pass_fds=() if keys_fd is None else (keys_fd,),
                )
            finally:
                if keys_fd is not None:
                    os.close(keys_fd)


def attempt_header(home: Path, claim: Claim) -> Path:
    path = log_path(home, claim.task_id)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "ab", buffering=0) as log:
        log.write(f"=== attempt {claim.attempt} (fence {claim.fence}) starting at {_now()}\n".encode())
    return path


def warm_forks() -> WarmForks:
    """A warm forkserver for kanban workers (``runner kanban dispatch``; serve passes its own)."""
    return WarmForks(Warm(modules=PRELOAD))


@dataclass
class TaskForkLauncher(LocalLaunchers):
    """Forks the worker from a warm forkserver: ``runner.kanban.work.forked_main`` in a new
    session, with the task and fence in its environment, the held keys through the forkserver's
    socket (never an environment block) and its output appended to the task's log. ``assignment``:
    the run row and host a ``runner worker`` gives the attempt (``runner.dist.kanban_worker``)."""

    settings: Settings
    forks: WarmForks
    assignment: Assignment | None = None

    def spawn(self, claim: Claim) -> WorkerHandle:
        """ForkError when the forkserver cannot fork it (the attempt fails to start)."""
        path = attempt_header(self.settings.home, claim)
        s = self.settings
        args: tuple[Any, ...] = (str(s.home), str(s.jobs_path), str(s.config_path), s.config_given, secrets.held())
        if self.assignment is not None:
            args += (self.assignment,)
        request = Spawn(
            WORKER,
            args,
            session=True,
            output=str(path),
            env={ENV_TASK: str(claim.task_id), ENV_FENCE: str(claim.fence)},
        )
        ticket = self.forks.submit(request)
        return WorkerHandle(self.forks, ticket, self.forks.pid(ticket))


def _now() -> str:
    return iso(utcnow()) or ""


class Changes:
    """When the dispatcher should tick: another process committed to runner.db (``PRAGMA
    data_version`` on ``conn`` moved), ``poll_seconds`` passed, or ``exited()`` says a worker ended."""

    def __init__(self, conn: sqlite3.Connection, poll_seconds: float, exited: Callable[[], bool]):
        self.conn, self.poll_seconds, self.exited = conn, poll_seconds, exited
        self._seen, self._next = -1, 0.0

    def due(self) -> bool:
        version = self.conn.execute("PRAGMA data_version").fetchone()[0]
        if version == self._seen and time.monotonic() < self._next and not self.exited():
            return False
        self._seen, self._next = version, time.monotonic() + self.poll_seconds
        return True


@dataclass
class _Child:
    handle: Handle
    fence: int


@dataclass
class Dispatcher:
    settings: Settings
    launcher: Launcher[Claim] | None = None
    board: Board | None = None
    owner: str = field(default_factory=lambda: f"{HOST}:{os.getpid()}:dispatch")
    capacity: Capacity = field(default_factory=HostCapacity)
    # what a claim is stamped with, read when the claim is made (a tick's ``now`` is read at its
    # start: a parent that completed during the tick would look completed after its child's
    # claim); None: the tick's ``now`` (a caller driving ticks with its own times)
    clock: Callable[[], datetime] | None = None

    def __post_init__(self) -> None:
        self._board = self.board or Board(self.settings.store)
        self._launcher: Launcher[Claim] = self.launcher or ProcessLauncher(self.settings)
        self._children: dict[int, _Child] = {}
        self._orphans = False
        cfg = self.settings.config.kanban
        self.max_workers, self.lease_seconds, self.backoff = cfg.max_workers, cfg.lease_seconds, cfg.retry_backoff
        self.poll_seconds = cfg.poll_seconds

    # -- the tick -----------------------------------------------------------------------
    def tick(self, now: datetime) -> DispatchTick:
        board = self._board
        if self._orphans:
            self._orphans = False
            self._recover_orphans(now)
        exited = self._reap(now)
        promoted = board.promote(now=now)
        reclaimed = board.reclaim_expired(now=now, backoff=self.backoff)
        lost: list[str] = []
        for r in reclaimed:
            error = f"the lease of kanban task {r.task_id} ran out: worker {r.owner} stopped renewing it"
            lost += ledger.lose_task_runs(board.store, str(r.task_id), error=error, now=now)
            if r.host == board.host and r.pid and r.pid > 0 and kill_tree(r.pid, 0, start=r.pid_start):
                self._orphans = True
        if lost:
            self._alert_lost(lost)
        started: list[Started] = []
        failed: list[tuple[int, str]] = []
        slots = self.max_workers - self.capacity.running(board)
        if slots > 0 and self._any_ready(now):
            at = now if self.clock is None else max(now, self.clock())
            for claim in board.claim(self.owner, now=at, lease_seconds=self.lease_seconds, limit=slots):
                self._start(claim, at, started, failed)
        return DispatchTick(
            promoted=tuple(promoted),
            reclaimed=tuple(reclaimed),
            exited=tuple(exited),
            started=tuple(started),
            failed_to_start=tuple(failed),
            running=self.capacity.running(board),
        )

    def _start(self, claim: Claim, now: datetime, started: list[Started], failed: list[tuple[int, str]]) -> None:
        board = self._board
        try:
            handle = self._launcher.spawn(claim)
        except (OSError, RunnerError) as exc:
            error = f"cannot start the worker: {exc}"
            board.fail_attempt(claim.task_id, claim.fence, error, now=now, backoff=self.backoff)
            failed.append((claim.task_id, error))
            return
        self._children[claim.task_id] = _Child(handle, claim.fence)
        started.append(Started(claim.task_id, claim.fence, handle.pid))
        if handle.pid <= 0:
            return  # a remote attempt: the worker that takes it records itself
        try:
            board.attach(
                claim.task_id, claim.fence, pid=handle.pid, pid_start=start_time(handle.pid), now=now, kind="spawned"
            )
        except FenceError:
            pass  # the worker was quicker: it already ended its attempt (recorded as refused)

    def _any_ready(self, now: datetime) -> bool:
        return self._board.any_ready(now)

    def _reap(self, now: datetime) -> list[Exited]:
        """Workers that exited: a task still running under their claim fails this attempt.
        A live worker whose task was claimed again by someone else is killed."""
        out: list[Exited] = []
        for task_id, child in list(self._children.items()):
            code = child.handle.poll()
            if code is None:
                fence = self._board.fence_of(task_id)
                if fence is not None and fence != child.fence:
                    child.handle.signal_tree(signal.SIGKILL)  # a remote attempt's: nothing (its lease fences it)
                continue
            del self._children[task_id]
            child.handle.close()
            status = self._board.worker_exited(task_id, child.fence, code, now=now, backoff=self.backoff)
            if status is not None:
                self._orphans = True
            out.append(Exited(task_id, child.fence, code, status))
        if out and self._orphans:
            self._orphans = False
            self._recover_orphans(now)
        return out

    def _recover_orphans(self, now: datetime) -> None:
        """Rows of lost workers become ``unknown`` (the launcher's ``lost``) and are alerted, on a
        thread: an alert sink that retries must not hold up dispatching."""
        lost = self._launcher.lost(self._board.store, now)
        if lost:
            self._alert_lost(lost)

    def _alert_lost(self, run_ids: list[str]) -> None:
        """Alert runs this dispatcher declared lost, on a thread: an alert sink that retries must not
        hold up dispatching."""
        threading.Thread(target=self.settings.alert_lost, args=(self.settings.store, run_ids), name="kanban-alerts").start()

    # -- the standalone loop ------------------------------------------------------------
    def run(
        self,
        stop: threading.Event,
        *,
        clock: Callable[[], datetime] | None = None,
        on_tick: Callable[[DispatchTick], None] | None = None,
        on_error: Callable[[Exception], None] | None = None,
    ) -> None:
        """Tick every ``poll_seconds``, and as soon as another process commits (checked every 50 ms).

        A database error in a tick (locked past the busy timeout, disk full) goes to ``on_error``
        and the loop carries on at the next poll; without ``on_error`` it propagates."""

        clock = clock or utcnow
        if self.clock is None:
            self.clock = clock
        changes = self.changes()
        while not stop.is_set():
            if changes.due():
                try:
                    result = self.tick(clock())
                except sqlite3.OperationalError as exc:
                    if on_error is None:
                        raise
                    on_error(exc)
                    continue
                if on_tick is not None:
                    on_tick(result)
            stop.wait(WAKE_CHECK_S)

    def changes(self) -> Changes:
        """The change detection ``run`` uses (serve's kanban loop uses it too)."""
        return Changes(self._board.store.conn, self.poll_seconds, self.children_exited)

    def children_exited(self) -> bool:
        return any(c.handle.poll() is not None for c in self._children.values())

    def close(self) -> None:
        """Forget the children (they keep running and renewing their leases) and reap none."""
        for child in self._children.values():
            child.handle.close()
        self._children.clear()
        if self.board is None:
            self._board.close()
