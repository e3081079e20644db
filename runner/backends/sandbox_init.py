"""The first process inside a run's sandbox: it starts the run's commands and opens its files.

Standard library only. ``runner.backends.sandbox`` runs this file's source as ``python -I -S -c SOURCE
FD`` inside bubblewrap (runner's own package may not be visible there); tests import it.

It talks to the runner over one ``SOCK_SEQPACKET`` socket (``FD``; no command inherits it): JSON
requests, some with a file descriptor attached (``SCM_RIGHTS``), and JSON replies.

* ``{"op": "run", "id": N, "argv": [...], "env": {...}, "cwd": DIR}`` + the output pipe: forks;
  the child leads a new session, reads /dev/null, writes to the pipe, and says
  ``{"id": N, "started": true}`` itself, so the kernel stamps that message with its pid as the
  runner sees it (``SCM_CREDENTIALS``); ``{"id": N, "exit": STATUS}`` (a wait status) follows
  when it ends, or ``{"id": N, "errno": E, "error": TEXT}`` when it could not start.
* ``{"op": "open", "id": N, "path": P}``: ``{"id": N}`` with the file opened for reading
  attached (regular files only).
* ``{"op": "create", "id": N, "path": P}``: makes the parent folders and a temporary sibling,
  ``{"id": N, "tmp": T}`` with it opened for writing attached; ``{"op": "commit", "id": N,
  "tmp": T, "path": P}`` renames it over P, ``{"op": "discard", ...}`` removes it.
* Any failure: ``{"id": N, "errno": E, "error": TEXT}``.

It exits when the socket closes (the run ended, or the runner died); with it ends the sandbox's
pid 1, and the kernel kills every process left in the sandbox.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import stat
import sys
from typing import Any

MAX_MESSAGE = 1 << 20


def serve(sock: socket.socket) -> None:
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    running: dict[int, int] = {}  # pid -> request id
    while True:
        ready, _, _ = select.select([sock.fileno(), wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
            reap(sock, running)
        if sock.fileno() in ready:
            try:
                data, ancillary, _, _ = sock.recvmsg(MAX_MESSAGE, socket.CMSG_SPACE(4 * 4))
            except OSError:
                return
            if not data:
                return  # the runner closed its end
            fds = received_fds(ancillary)
            try:
                handle(sock, json.loads(data), fds, running)
            finally:
                for fd in fds:
                    os.close(fd)


def received_fds(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    fds: list[int] = []
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            usable = len(data) - len(data) % 4
            fds.extend(memoryview(data[:usable]).cast("i"))
    return fds


def reply(sock: socket.socket, message: dict[str, Any], fd: int | None = None) -> None:
    data = json.dumps(message).encode()
    if fd is None:
        sock.send(data)
    else:
        sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fd.to_bytes(4, sys.byteorder))])


def reap(sock: socket.socket, running: dict[int, int]) -> None:
    while running:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        rid = running.pop(pid, None)
        if rid is not None:
            reply(sock, {"id": rid, "exit": status})


def handle(sock: socket.socket, req: dict[str, Any], fds: list[int], running: dict[int, int]) -> None:
    rid = int(req.get("id", 0))
    op = req.get("op")
    try:
        if op == "run":
            running[start(sock, req, fds[0])] = rid
        elif op == "open":
            fd = open_regular(req["path"])
            try:
                reply(sock, {"id": rid}, fd)
            finally:
                os.close(fd)
        elif op == "create":
            tmp, fd = create_sibling(req["path"], req["suffix"])
            try:
                reply(sock, {"id": rid, "tmp": tmp}, fd)
            finally:
                os.close(fd)
        elif op == "commit":
            os.replace(req["tmp"], req["path"])
            reply(sock, {"id": rid})
        elif op == "discard":
            os.unlink(req["tmp"])
            reply(sock, {"id": rid})
        else:
            reply(sock, {"id": rid, "errno": 22, "error": f"unknown request {op!r}"})
    except OSError as exc:
        reply(sock, {"id": rid, "errno": exc.errno or 5, "error": exc.strerror or str(exc)})
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        reply(sock, {"id": rid, "errno": 22, "error": f"bad request: {exc}"})


def start(sock: socket.socket, req: dict[str, Any], out: int) -> int:
    argv, env, cwd = list(req["argv"]), dict(req["env"]), str(req["cwd"])
    pid = os.fork()
    if pid:
        return pid
    try:  # the child: nothing here may return into the loop
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.chdir(cwd)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        sock.send(json.dumps({"id": req["id"], "started": True}).encode())
        os.execve(argv[0], argv, env)
    except OSError as exc:
        try:
            sock.send(
                json.dumps({"id": req["id"], "errno": exc.errno or 5, "error": exc.strerror or str(exc)}).encode()
            )
        finally:
            os._exit(127)
    os._exit(127)


def open_regular(path: str) -> int:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode):
        os.set_blocking(fd, True)
        return fd
    os.close(fd)
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(21, "Is a directory")
    raise OSError(22, "not a regular file")


def create_sibling(path: str, suffix: str) -> tuple[str, int]:
    parent = os.path.dirname(path) or "."
    os.makedirs(parent, exist_ok=True)
    if os.path.isdir(path):
        raise IsADirectoryError(21, "Is a directory")
    tmp = os.path.join(parent, f".{os.path.basename(path)}.{suffix}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    return tmp, fd


if __name__ == "__main__":
    serve(socket.socket(fileno=int(sys.argv[1])))
