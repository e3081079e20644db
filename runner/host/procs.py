"""Processes: who is alive, a process tree, killing one, and the two-stage stop on signals.

Everything reads ``/proc`` (Linux). ``psutil`` would make the tree walk portable, but importing
it costs 10-20 ms (measured with ``python -X importtime``) on every ``runner`` start that opens
the ledger, which the start-up benchmarks would show; without ``/proc`` a pid's start time is
unknown (a reused pid cannot be told apart, so it counts as the same process) and a tree has no
descendants (only the root and its process group are signalled).
"""

from __future__ import annotations

import enum
import functools
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar

HOST: str = os.uname().nodename  # this machine, as the ledger records where a run runs (socket.gethostname())

if TYPE_CHECKING:
    from concurrent.futures import Future

PROC = Path("/proc")
POLL_S = 0.02  # how often kill_tree looks whether the tree is gone during the grace period
Handler = Callable[[int, FrameType | None], Any] | int | None  # what signal.signal takes and returns


@dataclass(frozen=True)
class Stat:
    """The fields of ``/proc/PID/stat`` we use."""

    state: str  # R, S, D, Z (zombie: exited, not yet reaped), ...
    ppid: int
    start: str  # start time in clock ticks since boot: with the pid, it names one process


def stat(pid: int) -> Stat | None:
    """``/proc/PID/stat`` of ``pid``, or None when it does not exist (or /proc is absent)."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may hold spaces and ")": split after the last one
    fields = text.rsplit(")", 1)[1].split()
    return Stat(state=fields[0], ppid=int(fields[1]), start=fields[19])


def start_time(pid: int) -> str | None:
    """Start time of ``pid`` (clock ticks since boot), to tell a reused pid apart; None if unknown."""
    if pid == os.getpid():
        return _own_start_time(pid)
    st = stat(pid)
    return st.start if st else None


@functools.lru_cache(maxsize=1)
def _own_start_time(pid: int) -> str | None:
    """This process's start time, read once per pid (a forked child has a pid of its own): a
    reusable worker records it with every run it starts."""
    st = stat(pid)
    return st.start if st else None


def pid_alive(pid: int, start: str | None) -> bool:
    """``pid`` exists (a zombie counts) and, when both start times are known, is the process
    that had start time ``start`` (not a later process that reused the pid). A pid of 0 or less
    (a remote worker's handle, which has no process here) is never alive: ``kill(0, ...)`` would
    signal this very process group."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    current = start_time(pid)
    return start is None or current is None or current == start


def running(pid: int, start: str | None) -> bool:
    """Like ``pid_alive`` but a zombie (exited, waiting for its parent to reap it) is not running."""
    st = stat(pid)
    if st is None:
        return pid_alive(pid, start) if not PROC.is_dir() else False
    return st.state != "Z" and (start is None or st.start == start)


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid``, children first; empty where /proc is absent."""
    children: dict[int, list[int]] = {}
    entries = os.listdir(PROC) if PROC.is_dir() else []
    for entry in entries:
        if not entry.isdigit():
            continue
        st = stat(int(entry))
        if st is not None:
            children.setdefault(st.ppid, []).append(int(entry))
    out: list[int] = []
    queue = list(children.get(pid, []))
    while queue:
        child = queue.pop(0)
        out.append(child)
        queue.extend(children.get(child, []))
    return out


#: every command the local backend runs carries ``RUNNER_RUN_MARK=<run id>-<nonce>`` in its
#: environment: its own cleanup and the recovery of a run found ``unknown`` find what it left
RUN_MARK = "RUNNER_RUN_MARK"


def marked(name: str, value: str, *, prefix: bool = False) -> list[int]:
    """Live processes of this user (not this one) started with ``name=value`` in their environment
    (``/proc/PID/environ`` holds the environment a process was exec'd with); with ``prefix``, any
    value starting with ``value``. Empty without /proc."""
    needle = f"{name}={value}".encode()
    uid, me = os.getuid(), os.getpid()
    out: list[int] = []
    entries = os.listdir(PROC) if PROC.is_dir() else []
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            if (PROC / entry).stat().st_uid != uid:
                continue
            environ = (PROC / entry / "environ").read_bytes()
        except OSError:
            continue  # gone, or not ours to read
        variables = environ.split(b"\0")
        if any(v.startswith(needle) for v in variables) if prefix else needle in variables:
            out.append(int(entry))
    return out


def kill_marked(name: str, value: str, *, prefix: bool = False, rounds: int = 5) -> int:
    """SIGKILL every process ``marked(name, value, prefix=prefix)`` finds, and its process group
    unless that is ours; again while new ones appear (a process forking as it dies), at most
    ``rounds`` times. Returns how many processes were signalled."""
    own = os.getpgrp()
    killed: set[tuple[int, str | None]] = set()
    for _ in range(rounds):
        found = [(pid, start_time(pid)) for pid in marked(name, value, prefix=prefix)]
        fresh = [(pid, start) for pid, start in found if (pid, start) not in killed]
        if not fresh:
            break
        for pid, start in fresh:
            killed.add((pid, start))
            try:
                pgid = os.getpgid(pid)
            except ProcessLookupError:
                continue
            if pgid != own:
                _send(os.killpg, pgid, signal.SIGKILL)
            _send(os.kill, pid, signal.SIGKILL)
        time.sleep(POLL_S)
    return len(killed)


class Target(enum.Enum):
    """What a ``ProcessTree`` signal goes to: a process group, or one process."""

    GROUP = "group"
    PROCESS = "process"


class ProcessTree:
    """A process and its descendants, each remembered with its start time when first seen, so a
    later signal still reaches children orphaned in between and never a process that reused a pid.

    Signals go to each member's process group (backend commands run in sessions of their own,
    and a group also holds children that left the tree) except the caller's own group, where the
    member is signalled alone. ``group`` is a process group that belongs to the tree even after
    its leader exited (the local backend's command session).
    """

    def __init__(self, root: int, *, start: str | None = None, group: int | None = None):
        self.root = root
        self.group = group
        self._seen: dict[int, str | None] = {root: start if start is not None else start_time(root)}

    def members(self) -> list[int]:
        """The remembered and current members that are still the processes first seen, zombies included."""
        if not PROC.is_dir():
            return [self.root] if pid_alive(self.root, None) else []
        self._look()
        return [pid for pid, start in self._seen.items() if start is not None and start_time(pid) == start]

    def alive(self) -> bool:
        """Some member is still running (zombies do not count), or ``group`` still has a process."""
        self._look()
        known = [(pid, start) for pid, start in self._seen.items() if start is not None or not PROC.is_dir()]
        if any(running(pid, start) for pid, start in known):
            return True
        return self.group is not None and group_alive(self.group)

    def _look(self) -> None:
        """Remember the root's current descendants, while the root is still the process first seen
        (once it is gone, a process that reused its pid has descendants that are not ours)."""
        root_start = self._seen[self.root]
        if root_start is None or start_time(self.root) != root_start:
            return
        for pid in descendants(self.root):
            self._seen.setdefault(pid, start_time(pid))

    def targets(self) -> list[tuple[Target, int]]:
        """Whom ``signal`` reaches, in order: every member's group (a member in the caller's own
        group alone), the root's first. A run's process so learns it was stopped before its
        commands die of the same signal, and never takes a command killed by serve's shutdown
        for one that failed."""
        own = os.getpgrp()
        seen: set[int] = {own}
        out: list[tuple[Target, int]] = []
        for pid in self.members():  # the root is the first remembered
            try:
                pgid = os.getpgid(pid)
            except ProcessLookupError:
                continue
            if pgid == own:
                out.append((Target.PROCESS, pid))  # not in a group of its own (yet): never the caller's group
            elif pgid not in seen:
                seen.add(pgid)
                out.append((Target.GROUP, pgid))
        if self.group is not None and self.group not in seen:
            out.append((Target.GROUP, self.group))
        return out

    def signal(self, sig: int) -> None:
        for kind, target in self.targets():
            _send(os.killpg if kind is Target.GROUP else os.kill, target, sig)


def kill_tree(pid: int, grace: float, *, start: str | None = None, group: int | None = None) -> bool:
    """Stop ``pid`` and its descendants: SIGTERM, up to ``grace`` seconds for them to exit, then
    SIGKILL whatever is left (``grace`` 0: SIGKILL at once). With ``start``, only if ``pid`` is
    still that process. ``group``: a process group to signal too, even when ``pid`` is gone.
    Returns whether ``pid`` was still there (False and nothing signalled when gone and no ``group``).
    A pid of 0 or less (no process of this machine) signals nothing."""
    if pid <= 0:
        return False
    found = pid_alive(pid, start)
    if not found and group is None:
        return False
    tree = ProcessTree(pid, start=start, group=group)
    if grace > 0:
        tree.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and tree.alive():
            time.sleep(POLL_S)
    tree.signal(signal.SIGKILL)
    return found


def group_alive(pgid: int) -> bool:
    """Process group ``pgid`` still has a process (zombies included)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _send(kill: Callable[[int, int], None], target: int, sig: int) -> None:
    try:
        kill(target, sig)
    except (ProcessLookupError, PermissionError):
        return  # already gone, or no longer ours (pid reused)


# -- a run's cut: its current step ended now --------------------------------------------------
CUT_LOOK_S = 0.1  # how often a wait for a step looks whether the run was cut


@dataclass(frozen=True)
class Cut:
    """A run's order to end its current step now, set by its cancel watch (``runner runs cancel``,
    or the run's row ended by someone else: declared lost). A command, model request or MCP call
    being waited for ends as its timeout would end it: a command's process tree gets SIGTERM, then
    SIGKILL after ``grace`` seconds (config.yaml ``serve.kill_grace``)."""

    event: threading.Event = field(default_factory=threading.Event)
    grace: float = 5.0

    def is_set(self) -> bool:
        return self.event.is_set()


def wait_or_cut(wait: Callable[[float], bool], timeout: float | None, cut: Cut | None) -> bool:
    """``wait(seconds)`` waits at most that long for a step and says whether it ended. Returns
    True once the step ended; False at ``timeout`` (None: none) or, without waiting longer than
    ``CUT_LOOK_S``, once ``cut`` is set (``cut.is_set()`` then tells the two apart)."""
    end = None if timeout is None else time.monotonic() + timeout
    while True:
        left = None if end is None else max(0.0, end - time.monotonic())
        if cut is None and left is not None:
            return wait(left)
        if cut is not None and cut.is_set():
            return False
        if wait(CUT_LOOK_S if left is None else min(CUT_LOOK_S, left)):
            return True
        if left is not None and left <= CUT_LOOK_S:
            return False


# -- the two-stage stop ----------------------------------------------------------------------
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def install_two_stage_stop(
    stop: threading.Event, signals: Sequence[int] = STOP_SIGNALS, on_first: Callable[[int], None] | None = None
) -> dict[int, Handler]:
    """First signal: set ``stop`` (finish the current step, start nothing new) and call
    ``on_first(signum)``. A second one raises KeyboardInterrupt (stop hard). Returns the handlers it replaced."""

    def handler(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        if on_first is not None:
            on_first(signum)

    return {sig: signal.signal(sig, handler) for sig in signals}


@contextmanager
def two_stage_stop(
    stop: threading.Event, signals: Sequence[int] = STOP_SIGNALS, on_first: Callable[[int], None] | None = None
) -> Iterator[threading.Event]:
    """``install_two_stage_stop`` for the ``with`` block; the previous handlers come back after it."""
    previous = install_two_stage_stop(stop, signals, on_first)
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


SIGNAL_SLICE_S = 0.2
T = TypeVar("T")


def future_results(futures: Sequence[Future[T]], *, first_exception: bool = False) -> list[T]:
    """The results of ``futures`` in order, waited for in slices of ``SIGNAL_SLICE_S``;
    ``first_exception``: raise as soon as one raised (else once all are done, the first in order).

    Python runs signal handlers in the main thread only, and only when it is back in the
    interpreter; a signal the kernel delivered to another thread (a subagent's, a tool's) does not
    wake a main thread blocked in a plain ``wait`` or ``result()``. So a SIGTERM to a run whose
    main thread waits for its subagents would set the run's stop only after they had all ended."""
    from concurrent.futures import ALL_COMPLETED, FIRST_EXCEPTION, wait  # with logging: ~10 ms a start

    when = FIRST_EXCEPTION if first_exception else ALL_COMPLETED
    pending = list(futures)
    while pending:
        done, not_done = wait(pending, timeout=SIGNAL_SLICE_S, return_when=when)
        failed = [f for f in done if not f.cancelled() and f.exception() is not None]
        if first_exception and failed:
            failed[0].result()  # raises it
        pending = list(not_done)
    return [f.result() for f in futures]


# -- a run's own process as the reaper of what it started ---------------------------------------
PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37
PR_SET_DUMPABLE, PR_GET_DUMPABLE = 4, 3


def _prctl(option: int, arg: object) -> int:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(option, arg, 0, 0, 0))


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux ``PR_SET_CHILD_SUBREAPER``):
    a command that leaves its session, double-forks and clears its environment is still below us,
    so ``end_descendants`` finds it. Only for a process that runs one run (run-job, serve's worker,
    a kanban worker): a test runner calling ``execute`` in-process is left alone. False where
    unsupported."""
    try:
        return _prctl(PR_SET_CHILD_SUBREAPER, 1) == 0
    except (OSError, AttributeError):
        return False


def become_undumpable() -> bool:
    """Make this process non-dumpable (Linux ``PR_SET_DUMPABLE`` 0): another process of the same
    user can no longer read its memory (``/proc/PID/mem``), environment or file descriptors, nor
    attach a debugger, and it leaves no core dump. For every process that holds keys; a forked
    child keeps it, an exec'd command does not. False where unsupported."""
    try:
        return _prctl(PR_SET_DUMPABLE, 0) == 0
    except (OSError, AttributeError):
        return False


def is_subreaper() -> bool:
    import ctypes

    value = ctypes.c_int(0)
    try:
        return _prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(value)) == 0 and value.value == 1
    except (OSError, AttributeError):
        return False


def has_children() -> bool:
    """This process has a child, running or exited and not yet reaped (nothing is reaped here)."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True


def nothing_left() -> bool:
    """This process is a subreaper and has no child: nothing it started can still run anywhere
    (an orphaned descendant is reparented to it, whatever session it moved to), so the ``/proc``
    scans of ``kill_marked`` and ``end_descendants`` would find nothing. They cost milliseconds
    per run, growing with the processes on the machine: a burst of runs skips them."""
    return not has_children() and is_subreaper()


def end_descendants() -> int:
    """As a subreaper at the end of its run: SIGKILL every descendant of this process (the orphans
    it adopted included) and reap them; returns how many were signalled. Not a subreaper: 0."""
    if not is_subreaper():
        return 0
    victims = descendants(os.getpid())
    for pid in victims:
        _send(os.kill, pid, signal.SIGKILL)
    deadline = time.monotonic() + 2.0
    while victims and time.monotonic() < deadline:
        try:
            reaped, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if reaped == 0:
            time.sleep(POLL_S)
    return len(victims)
