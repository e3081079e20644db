"""The local backend's sandbox: bubblewrap around everything a run's agent runs on this machine.

A ``Plan`` says what a sandbox shows of the host: the whole file system read-only, the writable
folders (the workdir, ``allow_paths``, the job's ``sandbox.writable``) and a private ``/tmp`` (the
host's holds other users' files and sockets; runner's own Python environment and code, when they
live there, are shown read-only),
read-only islands inside those (the runner's control files), hidden paths (RUNNER_HOME,
config.yaml, jobs.yaml, the sockets of host daemons: empty and read-only inside), and whether the
host's network is shared. ``bwrap_args`` turns it into bubblewrap's options: new user, PID, IPC,
UTS and mount namespaces (no nested user namespaces with bubblewrap 0.8+), ``--new-session``,
``--die-with-parent``, no capabilities, no new privileges (bubblewrap always sets
``PR_SET_NO_NEW_PRIVS``).

``Box`` is one run's sandbox: started once, with ``runner/backends/sandbox_init.py`` inside as its
first process; every command of the run is a child of it, so the run's commands share one PID
namespace (a background server started by one command is there for the next), one private
``/tmp`` and (with ``network: false``) one loopback. Closing the box (or the runner dying) ends
its first process; the kernel then kills everything left inside. ``stdio_args`` wraps one
program (an MCP server) in a sandbox of its own with the same plan.
"""

from __future__ import annotations

import array
import enum
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.errors import BackendError
from runner.safety.inside import LAUNCHER_MARK

BWRAP = "bwrap"
PACKAGE_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap)"
#: sockets of host daemons a command could drive to act outside the sandbox (docker run -v /:/h,
#: systemd-run, the session bus); hidden when they exist
HOST_SOCKETS = (
    "/run/docker.sock",
    "/var/run/docker.sock",
    "/run/containerd",
    "/run/podman",
    "/run/dbus",
    "/run/systemd/private",
    "/run/user",
)
CLOSE_WAIT_S = 3.0
USER_ARGS = ("--unshare-user", "--cap-drop", "ALL")
#: the folder holding runner's own packages (a checkout, or site-packages)
RUNNER_ROOT = str(Path(__file__).resolve().parents[2])


class Mount(enum.Enum):
    """What one path of a plan becomes inside the sandbox."""

    WRITABLE = "writable"  # bound read-write at the same path
    READ_ONLY = "read_only"  # bound read-only over itself (inside a writable folder)
    HIDDEN = "hidden"  # an empty read-only file or folder in its place


@dataclass(frozen=True)
class Plan:
    """What a sandbox shows of the host (absolute host paths). Everything not named is read-only."""

    workdir: str
    writable: tuple[str, ...] = ()
    read_only: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()
    network: bool = True

    def mounts(self) -> list[tuple[str, Mount]]:
        """Each path once (hidden over read-only over writable), parents before children, existing paths only."""
        chosen: dict[str, Mount] = {}
        for kind, paths in (
            (Mount.WRITABLE, (self.workdir, *self.writable)),
            (Mount.READ_ONLY, self.read_only),
            (Mount.HIDDEN, (*self.hidden, *HOST_SOCKETS)),
        ):
            for path in paths:
                real = os.path.realpath(path)
                if os.path.lexists(real):
                    chosen[real] = kind
        for prefix in (sys.prefix, sys.base_prefix, RUNNER_ROOT):  # runner's own Python and code under /tmp
            real = os.path.realpath(prefix)
            if _under(real, "/tmp") and real not in chosen and not any(
                _under(real, p) for p, k in chosen.items() if k is Mount.WRITABLE
            ):
                chosen[real] = Mount.READ_ONLY
        hidden_dirs = [p for p, k in chosen.items() if k is Mount.HIDDEN and os.path.isdir(p)]
        out = [
            (path, kind)  # nothing read-only shows through a hidden folder (a writable one may: a kanban workspace)
            for path, kind in chosen.items()
            if kind is not Mount.READ_ONLY or not any(_under(path, h) for h in hidden_dirs)
        ]
        return sorted(out, key=lambda item: item[0].rstrip("/").count("/"))


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def bwrap_args(plan: Plan, *, tmp: str | None, empty_file: str, cwd: str | None = None) -> list[str]:
    """bubblewrap's options for ``plan`` (the program and its arguments follow ``--``).

    ``tmp``: the host folder that is ``/tmp`` inside (None: an empty tmpfs); ``empty_file``: an
    empty read-only file bound over each hidden file."""
    args = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    args += ["--tmpfs", "/tmp"] if tmp is None else ["--bind", tmp, "/tmp"]
    args += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    args += ["--new-session", "--die-with-parent", *_user_args()]
    if not plan.network:
        args.append("--unshare-net")
    remount: list[str] = []
    for path, kind in plan.mounts():
        if path == "/tmp":
            continue
        if kind is Mount.WRITABLE:
            args += ["--bind", path, path]
        elif kind is Mount.READ_ONLY:
            args += ["--ro-bind", path, path]
        elif os.path.isdir(path):
            args += ["--tmpfs", path]
            remount += ["--remount-ro", path]
        else:
            args += ["--ro-bind", empty_file, path]
    return [*args, *remount, "--chdir", cwd or plan.workdir]


def _user_args() -> list[str]:
    """A user namespace of its own (no capabilities outside it, also as root), and no nested
    ones where bubblewrap can refuse them (0.8 and later)."""
    return list(_setup()[1])


def problem() -> str | None:
    """Why no sandbox can start on this machine (bubblewrap missing, user namespaces off), or None."""
    return _setup()[0]


@functools.cache
def _setup() -> tuple[str | None, tuple[str, ...]]:
    """(the problem, or None; the user-namespace options that work here), found once per process
    by starting a tiny sandbox (a few milliseconds): with ``--disable-userns``, else without it
    (bubblewrap before 0.8 does not know it)."""
    path = shutil.which(BWRAP)
    if path is None:
        return f"the sandbox needs bubblewrap, which is not installed: {PACKAGE_HINT}", ()
    base = [path, "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--unshare-pid"]
    why = ""
    for user in (USER_ARGS + ("--disable-userns",), USER_ARGS):
        try:
            proc = subprocess.run([*base, *user, "--", "true"], capture_output=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"bubblewrap ({path}) cannot start a sandbox: {exc}", ()
        if proc.returncode == 0:
            return None, user
        lines = proc.stderr.decode(errors="replace").strip().splitlines()
        why = lines[-1] if lines else f"exit {proc.returncode}"
    hint = " (are unprivileged user namespaces disabled? sysctl kernel.unprivileged_userns_clone=1)"
    return f"bubblewrap ({path}) cannot start a sandbox: {why}{hint}", ()


def interpreter() -> str:
    """A Python for the box's first process: the real file behind this one (a venv's folder,
    possibly under the sandbox's private /tmp, is not needed: it runs with ``-I -S``)."""
    real = os.path.realpath(sys.executable)
    return real if os.access(real, os.X_OK) else "/usr/bin/python3"


@dataclass
class _Waiter:
    event: threading.Event = field(default_factory=threading.Event)
    reply: dict[str, Any] = field(default_factory=dict)
    fd: int | None = None


class Spawned:
    """A command started in a box: its pid as this machine sees it, and its exit."""

    def __init__(self, pid: int):
        self.pid = pid
        self.status: int | None = None
        self._done = threading.Event()

    def exited(self, status: int) -> None:
        self.status = status
        self._done.set()

    def wait(self, timeout: float | None) -> bool:
        """True when the command exited within ``timeout`` seconds."""
        return self._done.wait(timeout)

    @property
    def returncode(self) -> int | None:
        return None if self.status is None else os.waitstatus_to_exitcode(self.status)


class Box:
    """One run's sandbox (see the module docstring). Thread-safe: parallel tool calls share it."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self._home = tempfile.mkdtemp(prefix="runner-sandbox-")
        tmp = os.path.join(self._home, "tmp")
        empty = os.path.join(self._home, "empty")
        os.mkdir(tmp, 0o700)
        with open(empty, "wb"):
            pass
        os.chmod(empty, 0o444)
        self._errors = open(os.path.join(self._home, "errors"), "w+b")  # noqa: SIM115 - closed by close()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self._sock = ours
        self._lock = threading.Lock()
        self._next = 0
        self._waiters: dict[int, _Waiter] = {}
        self._spawned: dict[int, Spawned] = {}
        self._dead: str | None = None
        source = Path(__file__).with_name("sandbox_init.py").read_text(encoding="utf-8")
        self._info, info = os.pipe()  # bubblewrap writes the host pid of the sandbox's pid 1 there
        argv = [BWRAP, *bwrap_args(plan, tmp=tmp, empty_file=empty), "--info-fd", str(info), "--"]
        argv += [interpreter(), "-I", "-S", "-c", source, str(theirs.fileno()), LAUNCHER_MARK]
        try:
            self._proc = subprocess.Popen(
                argv,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},  # bwrap and pid 2 are visible inside
                pass_fds=(theirs.fileno(), info),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self._errors,
            )
        except OSError as exc:
            ours.close()
            self._errors.close()
            os.close(self._info)
            shutil.rmtree(self._home, ignore_errors=True)
            raise BackendError(f"sandbox: cannot start bubblewrap: {exc}; {PACKAGE_HINT}") from exc
        finally:
            theirs.close()
            os.close(info)
        self._reader = threading.Thread(target=self._read, name="sandbox-reader", daemon=True)
        self._reader.start()

    # -- requests ---------------------------------------------------------------------------
    def spawn(self, argv: Sequence[str], env: Mapping[str, str], cwd: str, out: int) -> Spawned:
        """Start ``argv`` inside; its stdout and stderr go to ``out`` (this call closes it)."""
        try:
            reply, _ = self._ask({"op": "run", "argv": list(argv), "env": dict(env), "cwd": cwd}, out)
        finally:
            os.close(out)
        return reply["spawned"]

    def open_read(self, path: str) -> int:
        """A file opened for reading inside the sandbox (OSError as a local open would raise)."""
        _, fd = self._ask({"op": "open", "path": path})
        if fd is None:
            raise BackendError("sandbox: no file came back")
        return fd

    def read(self, path: str) -> bytes:
        fd = self.open_read(path)
        with os.fdopen(fd, "rb") as fh:
            return fh.read()

    def write(self, path: str, data: bytes, suffix: str) -> None:
        """Write ``path`` inside the sandbox through a temporary sibling renamed over it."""
        reply, fd = self._ask({"op": "create", "path": path, "suffix": suffix})
        tmp = reply["tmp"]
        if fd is None:
            raise BackendError("sandbox: no file came back")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
        except OSError:
            self._ask({"op": "discard", "tmp": tmp})
            raise
        self._ask({"op": "commit", "tmp": tmp, "path": path})

    def _ask(self, request: dict[str, Any], fd: int | None = None) -> tuple[dict[str, Any], int | None]:
        waiter = _Waiter()
        with self._lock:
            if self._dead is not None:
                raise BackendError(f"sandbox: {self._dead}")
            self._next += 1
            rid = self._next
            self._waiters[rid] = waiter
        data = json.dumps({**request, "id": rid}).encode()
        try:
            if fd is None:
                self._sock.send(data)
            else:
                self._sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
        except OSError as exc:
            with self._lock:
                self._waiters.pop(rid, None)
            raise BackendError(f"sandbox: the sandbox is gone ({exc})") from exc
        waiter.event.wait()
        reply = waiter.reply
        if "dead" in reply:
            raise BackendError(f"sandbox: {reply['dead']}")
        if "errno" in reply:
            raise OSError(int(reply["errno"]), str(reply.get("error", "failed")), request.get("path"))
        return reply, waiter.fd

    # -- the reader thread --------------------------------------------------------------------
    def _read(self) -> None:
        space = socket.CMSG_SPACE(4 * 4) + socket.CMSG_SPACE(3 * 4)
        try:
            while True:
                data, ancillary, _, _ = self._sock.recvmsg(1 << 16, space)
                if not data:
                    break
                self._dispatch(json.loads(data), *_ancillary(ancillary))
        except (OSError, ValueError):
            pass  # the socket was closed, or the box sent garbage: either way it is over
        self._end(self._ended())

    def _ended(self) -> str:
        """Why the box is gone: what bubblewrap or the first process said, if they said anything."""
        try:
            self._proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            return "the sandbox ended"
        self._errors.seek(0)
        said = self._errors.read(4000).decode(errors="replace").strip().splitlines()
        return f"the sandbox ended: {said[-1]}" if said else "the sandbox ended"

    def _dispatch(self, msg: dict[str, Any], fds: list[int], pid: int | None) -> None:
        rid = msg.get("id")
        if not isinstance(rid, int):
            _close_all(fds)
            return
        if "exit" in msg:
            with self._lock:
                spawned = self._spawned.pop(rid, None)
            if spawned is not None:
                spawned.exited(int(msg["exit"]))
            return
        with self._lock:
            waiter = self._waiters.pop(rid, None)
            if waiter is not None and msg.get("started") and pid is not None:
                spawned = Spawned(pid)
                self._spawned[rid] = spawned
                msg = {"spawned": spawned}
        if waiter is None:
            _close_all(fds)
            return
        waiter.reply = msg
        waiter.fd = fds.pop(0) if fds else None
        _close_all(fds)
        waiter.event.set()

    def _end(self, why: str) -> None:
        with self._lock:
            if self._dead is None:
                self._dead = why
            waiters, self._waiters = list(self._waiters.values()), {}
            spawned, self._spawned = list(self._spawned.values()), {}
        for waiter in waiters:
            waiter.reply = {"dead": why}
            waiter.event.set()
        for command in spawned:
            command.exited(9)  # killed with the sandbox

    # -- the end ------------------------------------------------------------------------------
    @property
    def pid(self) -> int:
        """bubblewrap's pid (its child is the sandbox's pid 1)."""
        return self._proc.pid

    def close(self) -> None:
        """End the sandbox and everything in it; remove its private /tmp. Its first process exits
        when the socket closes (one still starting exits at its first read), and the kernel ends
        the rest with its PID namespace; one that does not within ``CLOSE_WAIT_S`` (stopped) is
        killed with the namespace's init."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        try:
            self._proc.wait(timeout=CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            self._kill()
        _reap(self._init())
        self._reader.join(timeout=2.0)
        self._errors.close()
        shutil.rmtree(self._home, ignore_errors=True)

    def _init(self) -> int | None:
        """The host pid of the sandbox's pid 1, as bubblewrap wrote it to its info pipe (read once
        bubblewrap is gone: every writer has closed it by then); None if it never got that far."""
        chunks = []
        with os.fdopen(self._info, "rb") as fh:
            chunks.append(fh.read(4096))
        try:
            return int(json.loads(b"".join(chunks) or b"{}").get("child-pid", 0)) or None
        except ValueError:
            return None

    def _kill(self) -> None:
        """SIGKILL the sandbox's pid 1 (the kernel then kills every process of its namespace), then
        bubblewrap. Killing bubblewrap alone can leave pid 1 behind: its parent-death signal does
        not survive the user namespace's set-up."""
        pid = self._proc.pid
        try:
            inits = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        except OSError:
            inits = []
        for init in inits:
            try:
                os.kill(init, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._proc.kill()
        self._proc.wait()


def _reap(init: int | None) -> None:
    """bubblewrap exits without reaping the sandbox's pid 1; the orphan goes to the nearest
    subreaper, which a run's own process is (``runner.host.procs.become_subreaper``): reap it here so
    a long-lived worker collects no zombies. Elsewhere it is not our child, and init reaps it."""
    if init is None:
        return
    try:
        os.waitpid(init, 0)
    except ChildProcessError:
        pass


def _ancillary(ancillary: Iterable[tuple[int, int, bytes]]) -> tuple[list[int], int | None]:
    fds: list[int] = []
    pid: int | None = None
    for level, kind, data in ancillary:
        if level != socket.SOL_SOCKET:
            continue
        if kind == socket.SCM_RIGHTS:
            usable = len(data) - len(data) % 4
            fds.extend(array.array("i", data[:usable]))
        elif kind == socket.SCM_CREDENTIALS and len(data) >= 4:
            pid = array.array("i", data[:4])[0]
    return fds, pid


def _close_all(fds: Iterable[int]) -> None:
    for fd in fds:
        os.close(fd)


def stdio_args(plan: Plan, argv: Sequence[str], cwd: str) -> list[str]:
    """The command line that runs ``argv`` (an MCP server speaking on stdin/stdout) in ``cwd`` in
    a sandbox of its own: the same plan, an empty ``/tmp`` of its own, no view of the run's
    commands (their processes and variables) nor they of its."""
    return [BWRAP, *bwrap_args(plan, tmp=None, empty_file="/dev/null", cwd=cwd), "--", *argv]
