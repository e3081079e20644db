"""A warm forkserver: one long-lived helper process that has imported everything a worker needs
and forks a child per run (serve's runs, kanban workers), so starting a worker costs a ``fork()``
and no interpreter start, import or ``multiprocessing`` bootstrap.

The helper is a fresh interpreter (``python -m runner.run.forks``) started with ``close_fds``: it holds
none of its parent's descriptors (serve's lock, its SQLite connection, its pipes) and no thread.
Parent and helper talk over one socket pair, in length-prefixed pickled frames:

- parent -> helper: ``Warm`` once (modules to import, ``module:function`` set-up calls), then a
  ``Spawn`` per child (``module:function`` and its arguments; a new session or a process group;
  a log file for stdout and stderr; environment variables). A ``Spawn`` with ``channel`` carries
  one end of a socket pair the parent made (``SCM_RIGHTS``): the child gets it as its target's
  first argument, so parent and child talk directly (serve's reusable workers, runner.serve.reuse);
- helper -> parent: ``ready``, then ``forked``/``refused`` per request and ``exited`` per child.

Keys the child must hold travel in the pickled arguments (the socket), never in an environment
block. A child closes the helper's socket and its signal set-up before it runs its target, so it
cannot ask for forks. When the parent goes away the helper exits (EOF) and leaves its children
running; when the helper dies, ``WarmForks`` notices, reports children it can no longer reap by
watching their pids, and starts a new helper for the next request. A parent that keeps the helper only
while children are near stops it with ``stop_if_idle`` and starts it again ahead with ``ensure``
(serve: ``serve.forkserver_idle_s``).

The parent's side also holds the seam every supervisor starts its workers through: ``Launcher``
(spawn, lost) and ``Handle`` (wait, signal); ``WorkerHandle`` is a forked child's. Nothing here
imports serve or kanban: targets are named by string.
"""

from __future__ import annotations

import gc
import importlib
import os
import pickle
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from runner.host.procs import ProcessTree

if TYPE_CHECKING:
    from datetime import datetime

    from runner.store import Store

from runner.host.procs import become_undumpable, running, start_time

HEADER = struct.Struct("!I")
LOST_EXIT = 255  # what poll() reports for a child whose helper died before telling its exit code
S = TypeVar("S", contravariant=True)


@dataclass(frozen=True)
class Warm:
    """The helper's one-time preparation: imports, then set-up calls (``module:function``, args)."""

    modules: tuple[str, ...] = ()
    setup: tuple[tuple[str, tuple[Any, ...]], ...] = ()


@dataclass(frozen=True)
class Spawn:
    """One child: ``target`` (``module:function``) called with ``args``."""

    target: str
    args: tuple[Any, ...] = ()
    session: bool = False  # a new session (kanban workers); else a process group of its own
    output: str | None = None  # append stdout and stderr to this file (stdin from /dev/null)
    env: dict[str, str] = field(default_factory=dict)
    channel: bool = False  # the target's first argument is the socket the parent sent with this request


def resolve(target: str) -> Callable[..., Any]:
    module, _, name = target.partition(":")
    fn: Callable[..., Any] = getattr(importlib.import_module(module), name)
    return fn


# -- framing ---------------------------------------------------------------------------------
def send_frame(sock: socket.socket, message: tuple[Any, ...], fd: int | None = None) -> None:
    """One length-prefixed pickled frame; ``fd`` travels with its first byte (``SCM_RIGHTS``)."""
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    data = HEADER.pack(len(body)) + body
    if fd is not None:
        sent = socket.send_fds(sock, [data], [fd])
        data = data[sent:]
    if data:
        sock.sendall(data)


class Frames:
    """Frames read from a socket as bytes arrive."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[Any, ...]]:
        self._buf += data
        out: list[tuple[Any, ...]] = []
        while len(self._buf) >= HEADER.size:
            (size,) = HEADER.unpack_from(self._buf)
            if len(self._buf) < HEADER.size + size:
                break
            out.append(pickle.loads(bytes(self._buf[HEADER.size : HEADER.size + size])))
            del self._buf[: HEADER.size + size]
        return out


# -- the parent's side ---------------------------------------------------------------------------
class ForkError(OSError):
    """The helper could not start a child (or is gone)."""


class WarmForks:
    """The parent's handle on the helper. Thread-safe; ``fileno()`` becomes readable when the
    helper has news (a child exited), for a parent that waits on several descriptors."""

    def __init__(self, warm: Warm, *, python: str = sys.executable):
        self.warm_spec, self.python = warm, python
        self._lock = threading.RLock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._frames = Frames()
        self._ready = False
        self._seq = 0
        self._replies: dict[int, tuple[Any, ...]] = {}
        self._exits: dict[int, int] = {}
        self._orphans: dict[int, str | None] = {}  # children of a helper that died: pid -> start time
        self._children: set[int] = set()
        self._unanswered: set[int] = set()  # tickets whose fork the helper has not reported yet
        self._used = time.monotonic()  # the last request, ``ensure`` or child forgotten: ``stop_if_idle``

    # -- life of the helper ---------------------------------------------------------------------
    def start(self) -> WarmForks:
        """Start the helper; it imports in the background (``ready()`` waits for it)."""
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                return self
            ours, theirs = socket.socketpair()
            ours.set_inheritable(False)
            self._proc = subprocess.Popen(
                [self.python, "-m", "runner.run.forks", str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                close_fds=True,
            )
            theirs.close()
            self._sock, self._frames, self._ready = ours, Frames(), False
            send_frame(ours, ("warm", self.warm_spec))
        return self

    @property
    def running(self) -> bool:
        """Whether the helper process is alive now."""
        with self._lock:
            return self._proc is not None and self._proc.poll() is None

    def ensure(self) -> None:
        """A child will be asked for soon: have the helper running (a stopped or dead one is
        started again, importing in the background) and count this as a use (``stop_if_idle``)."""
        with self._lock:
            self._used = time.monotonic()
            if not self.running:
                self._restart()

    def stop_if_idle(self, idle_s: float) -> bool:
        """Stop the helper when it has no child, no fork in flight and nothing asked of it for
        ``idle_s`` seconds (``ensure``, a request, a child forgotten); True when it was stopped.
        The next request (or ``ensure``) starts it again."""
        with self._lock:
            if self._proc is None:
                return False
            if self._sock is not None:
                self._read(0.0)  # exits and answers already sent
            if self._children or self._unanswered or time.monotonic() - self._used < idle_s:
                return False
            self.close()
            self._ready = False
            return True

    def ready(self, timeout: float = 120.0) -> None:
        """Wait until the helper has done its imports and set-up (raises ForkError if it died)."""
        with self._lock:
            if self._sock is None:
                self.start()
            deadline = time.monotonic() + timeout
            while not self._ready:
                self._read(max(0.0, deadline - time.monotonic()))
                if not self._ready and time.monotonic() >= deadline:
                    raise ForkError("the warm forkserver did not get ready in time")

    def fileno(self) -> int:
        with self._lock:
            if self._sock is None:
                self.start()
            assert self._sock is not None
            return self._sock.fileno()

    def close(self) -> None:
        """Stop the helper (its children keep running)."""
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None
            if self._proc is not None:
                try:
                    self._proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()
                self._proc = None

    @property
    def server_pid(self) -> int | None:
        """The helper's pid (None before it started)."""
        return self._proc.pid if self._proc is not None else None

    # -- children ---------------------------------------------------------------------------------
    def submit(self, request: Spawn, channel: socket.socket | None = None) -> int:
        """Ask for a child without waiting for the fork: returns a ticket for ``pid`` (ForkError
        when the helper cannot be reached). A parent that starts many children at once (a burst)
        goes on with its own work while the helper forks. ``channel`` (with ``request.channel``):
        the socket the child gets as its target's first argument (the caller closes its copy)."""
        if request.channel != (channel is not None):
            raise ValueError("a Spawn with channel=True needs a channel socket, and only it")
        with self._lock:
            if self._sock is None or self._proc is None or self._proc.poll() is not None:
                self._restart()
            # a child is asked for once the helper is ready: a run's timeout, which serve starts
            # when this returns, does not count a stopped forkserver's imports
            self.ready()
            self._seq += 1
            self._used = time.monotonic()
            try:
                assert self._sock is not None
                fd = channel.fileno() if channel is not None else None
                send_frame(self._sock, ("spawn", self._seq, request), fd)
            except OSError as exc:
                self._lost()
                raise ForkError(f"the warm forkserver is gone: {exc}") from None
            self._unanswered.add(self._seq)
            return self._seq

    def pid(self, ticket: int, *, wait: bool = True, timeout: float = 30.0) -> int | None:
        """The pid of the child ``ticket`` asked for; without ``wait``, None while the helper has
        not answered. ForkError when the fork failed or the helper died before answering."""
        with self._lock:
            deadline = time.monotonic() + timeout
            while ticket not in self._replies:
                if self._sock is None:
                    raise ForkError("the warm forkserver died while forking")
                remaining = deadline - time.monotonic()
                if wait and remaining <= 0:
                    raise ForkError("the warm forkserver did not answer in time")
                self._read(max(0.0, remaining) if wait else 0.0)
                if not wait and ticket not in self._replies:
                    return None
            reply = self._replies.pop(ticket)
            self._unanswered.discard(ticket)
            if reply[0] == "refused":
                raise ForkError(f"the warm forkserver could not fork: {reply[2]}")
            pid = int(reply[2])
            self._children.add(pid)
            return pid

    def spawn(self, request: Spawn, timeout: float = 30.0) -> int:
        """Fork a child for ``request`` and return its pid (ForkError when the helper cannot)."""
        pid = self.pid(self.submit(request), timeout=timeout)
        assert pid is not None
        return pid

    def poll(self, pid: int) -> int | None:
        """``pid``'s exit code once it has ended (negative: the signal that killed it)."""
        with self._lock:
            if pid in self._exits:
                return self._exits[pid]
            if self._sock is not None:
                self._read(0.0)
                if pid in self._exits:
                    return self._exits[pid]
            if pid in self._orphans and not running(pid, self._orphans[pid]):
                del self._orphans[pid]
                self._exits[pid] = LOST_EXIT
                return LOST_EXIT
            return None

    def forget(self, pid: int) -> None:
        with self._lock:
            self._exits.pop(pid, None)
            self._orphans.pop(pid, None)
            self._children.discard(pid)
            self._used = time.monotonic()  # the idle time of ``stop_if_idle`` counts from the last child

    # -- internals --------------------------------------------------------------------------------
    def _restart(self) -> None:
        self._lost()
        self.start()

    def _lost(self) -> None:
        """The helper is gone: watch its unreaped children by pid from now on."""

        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
            self._proc = None
        for pid in self._children:
            if pid not in self._exits:
                self._orphans[pid] = start_time(pid)
        self._unanswered.clear()  # their ``pid()`` raises ForkError: the helper died while forking
        self._ready = False

    def _read(self, timeout: float) -> None:
        """Read what the helper sent (waiting at most ``timeout`` for the first bytes)."""
        sock = self._sock
        if sock is None:
            return
        sock.settimeout(timeout if timeout > 0 else 0.0)
        chunks = []
        try:
            while True:
                data = sock.recv(65536)
                if not data:
                    self._lost()
                    break
                chunks.append(data)
                sock.settimeout(0.0)
        except (BlockingIOError, TimeoutError, InterruptedError):
            pass
        except OSError:
            self._lost()
        for message in self._frames.feed(b"".join(chunks)):
            self._take(message)

    def _take(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "ready":
            self._ready = True
        elif kind in ("forked", "refused"):
            self._replies[int(message[1])] = message
        elif kind == "exited":
            self._exits[int(message[1])] = int(message[2])


# -- the parent's side: the launcher seam and a forked worker's handle -------------------------------
class Handle(Protocol):
    """A started worker: wait for it (``poll``; ``sentinel`` is readable when there may be news),
    signal it (``signal_tree``), forget it (``close``). ``pid`` 0: no process of this machine."""

    @property
    def pid(self) -> int: ...

    @property
    def sentinel(self) -> int: ...

    def poll(self) -> int | None: ...

    def signal_tree(self, sig: int) -> None: ...

    def close(self) -> None: ...


class Launcher(Protocol[S]):
    """The one way to start a worker that calls ``execute()``, for a run (``WorkerSpec``) or a
    kanban attempt (``Claim``): forked here from a warm forkserver (``runner.serve.launcher.ForkLauncher``,
    ``runner.kanban.dispatch.TaskForkLauncher``) or sent to a ``runner worker`` through Celery
    (``runner.dist``). ``spawn`` returns its ``Handle`` (wait, signal); ``lost`` ends the runs of
    its workers that are gone through the ledger's one recovery (this host's dead processes:
    ``recover_orphans``; silent heartbeats: ``recover_stale``) and returns their ids."""

    def spawn(self, spec: S) -> Handle: ...

    def lost(self, store: Store, now: datetime) -> list[str]: ...


class WorkerHandle:
    """A child of the warm forkserver, as the pool sees it (``Handle``). Its pid is known once the
    forkserver has answered; until then ``poll`` says it is running."""

    def __init__(self, forks: WarmForks, ticket: int, pid: int | None = None):
        self._forks = forks
        self._ticket = ticket
        self._pid = pid
        self._tree = None if pid is None else ProcessTree(pid)
        self._failed = False  # the fork failed, or the forkserver died before answering

    def _resolve(self, wait: bool) -> int | None:
        if self._pid is None and not self._failed:
            try:
                self._pid = self._forks.pid(self._ticket, wait=wait)
            except ForkError as exc:
                print(f"runner serve: {exc}", file=sys.stderr)
                self._failed = True
            if self._pid is not None:
                self._tree = ProcessTree(self._pid)
        return self._pid

    @property
    def pid(self) -> int:
        return self._resolve(wait=True) or 0

    @property
    def sentinel(self) -> int:
        """Readable when the forkserver has news (a fork done, an exit; shared by every worker)."""
        return self._forks.fileno()

    def poll(self) -> int | None:
        """Exit code once the worker has ended (negative: killed by that signal)."""
        pid = self._resolve(wait=False)
        if self._failed:
            return LOST_EXIT
        return None if pid is None else self._forks.poll(pid)

    def signal_tree(self, sig: int) -> None:
        """Send ``sig`` to the worker, its group, and every descendant and its group (never serve's)."""
        self._resolve(wait=True)
        if self._tree is not None:
            self._tree.signal(sig)

    def close(self) -> None:
        if self._pid is not None:
            self._forks.forget(self._pid)


# -- the helper's side ------------------------------------------------------------------------------
class _Helper:
    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.frames = Frames()
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.sel = selectors.DefaultSelector()
        self.passed: list[int] = []  # descriptors received with spawn requests, in order
        self.pid = os.getpid()

    def serve(self) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        sel = self.sel
        sel.register(self.sock, selectors.EVENT_READ)
        sel.register(self.wake_r, selectors.EVENT_READ)
        while True:
            for key, _ in sel.select():
                if key.fileobj is self.sock:
                    data, fds, _, _ = socket.recv_fds(self.sock, 65536, 8)
                    for fd in fds:  # a descriptor arrives with its frame's first byte: ahead of it
                        os.set_inheritable(fd, False)  # never inherited by what the child executes
                        self.passed.append(fd)
                    if not data:
                        return  # the parent is gone: leave the children running
                    for message in self.frames.feed(data):
                        self.handle(message)
                else:
                    _drain(self.wake_r)
            self.reap()

    def handle(self, message: tuple[Any, ...]) -> None:
        if message[0] == "warm":
            self.prepare(message[1])
            gc.collect()
            gc.freeze()  # the preloaded objects are never scanned by a child's collector: fewer copied pages
            send_frame(self.sock, ("ready",))
        elif message[0] == "spawn":
            seq, request = message[1], message[2]
            channel = self.passed.pop(0) if request.channel else None
            try:
                pid = os.fork()
            except OSError as exc:
                send_frame(self.sock, ("refused", seq, str(exc)))
                return
            finally:
                if channel is not None and os.getpid() == self.pid:
                    os.close(channel)  # the child's now (or nobody's: the fork failed)
            if pid == 0:
                self.child(request, channel)  # never returns
            send_frame(self.sock, ("forked", seq, pid))

    def prepare(self, warm: Warm) -> None:
        for name in warm.modules:
            try:
                importlib.import_module(name)
            except Exception as exc:  # noqa: BLE001 - a child imports it again and reports the error
                print(f"warm forkserver: cannot preload {name}: {exc}", file=sys.stderr, flush=True)
        for target, args in warm.setup:
            try:
                resolve(target)(*args)
            except Exception as exc:  # noqa: BLE001 - the set-up is a cache: children do without it
                print(f"warm forkserver: {target} failed: {exc}", file=sys.stderr, flush=True)

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            send_frame(self.sock, ("exited", pid, os.waitstatus_to_exitcode(status)))  # negative: the signal

    def child(self, request: Spawn, channel: int | None) -> None:
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, signal.SIG_DFL)
            self.sel.close()
            self.sock.close()
            os.close(self.wake_r)
            os.close(self.wake_w)
            for fd in self.passed:  # other children's channels, received ahead of their requests
                os.close(fd)
            _detach(request)
            os.environ.update(request.env)
            target = resolve(request.target)
            if channel is None:
                target(*request.args)
            else:
                target(socket.socket(fileno=channel), *request.args)
            code = 0
        except SystemExit as exc:
            code = _system_exit_code(exc)
        except BaseException:  # noqa: BLE001 - the child's last word goes to its stderr
            traceback.print_exc()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            os._exit(code)


def _detach(request: Spawn) -> None:
    if request.session:
        os.setsid()
    else:
        os.setpgid(0, 0)
    if request.output is not None:
        fd = os.open(request.output, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.close(null)


def _system_exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        return


def main(argv: list[str]) -> None:
    become_undumpable()  # its forked workers receive keys: they keep this flag
    sock = socket.socket(fileno=int(argv[0]))
    sock.set_inheritable(False)
    try:
        _Helper(sock).serve()
    except (BrokenPipeError, ConnectionResetError):
        return  # the parent is gone (it may have stopped before we were ready): nothing to report to


if __name__ == "__main__":
    main(sys.argv[1:])
