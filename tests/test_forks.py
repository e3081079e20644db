"""The warm forkserver (runner/run/forks.py) with real processes: exit codes and signals come back,
a child holds none of the helper's descriptors and leads its own group, and a helper that dies
is noticed (its children watched by pid) and replaced."""

from __future__ import annotations

import os
import signal
import socket
import time

import pytest

from runner.run.forks import LOST_EXIT, Spawn, Warm, WarmForks


@pytest.fixture
def forks():
    server = WarmForks(Warm(modules=("json",))).start()
    server.ready()
    yield server
    server.close()


def exit_of(forks: WarmForks, pid: int, timeout: float = 10.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = forks.poll(pid)
        if code is not None:
            return code
        time.sleep(0.02)
    raise AssertionError(f"pid {pid} did not end")


def settled(check, timeout: float = 10.0) -> None:
    """``check()`` holds soon (a child sets itself up after the fork returns)."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_exit_codes_and_signals_come_back(forks):
    assert exit_of(forks, forks.spawn(Spawn("os:_exit", (3,)))) == 3
    assert exit_of(forks, forks.spawn(Spawn("json:dumps", ({},)))) == 0  # a target that returns
    sleeper = forks.spawn(Spawn("time:sleep", (30,)))
    os.kill(sleeper, signal.SIGTERM)
    assert exit_of(forks, sleeper) == -signal.SIGTERM


def test_a_child_holds_no_descriptor_of_the_helper_and_leads_its_group(forks):
    pid = forks.spawn(Spawn("time:sleep", (30,)))
    try:
        settled(lambda: os.getpgid(pid) == pid)
        settled(lambda: sorted(int(fd) for fd in os.listdir(f"/proc/{pid}/fd")) == [0, 1, 2])
    finally:
        os.kill(pid, signal.SIGKILL)
    exit_of(forks, pid)


def test_a_channel_reaches_its_own_child_and_only_it(forks):
    pairs = [socket.socketpair() for _ in range(3)]
    tickets = []
    for i, (_, theirs) in enumerate(pairs):  # sent back to back: the helper matches each to its request
        tickets.append(forks.submit(Spawn("socket:send_fds", ([f"child {i}".encode()], []), channel=True), theirs))
        theirs.close()
    for i, ((ours, _), ticket) in enumerate(zip(pairs, tickets, strict=True)):
        pid = forks.pid(ticket)
        assert pid is not None and exit_of(forks, pid) == 0
        ours.settimeout(10)
        assert ours.recv(100) == f"child {i}".encode()
        assert ours.recv(100) == b""  # EOF: neither the helper nor a sibling kept a copy of the child's end
        ours.close()
    with pytest.raises(ValueError):
        forks.submit(Spawn("os:_exit", (0,), channel=True))


def test_output_environment_and_session(forks, tmp_path):
    log = tmp_path / "out.log"
    pid = forks.spawn(Spawn("time:sleep", (30,), session=True, output=str(log), env={"FORKS_TEST": "yes"}))
    try:
        settled(lambda: os.getsid(pid) == pid)
        settled(lambda: os.readlink(f"/proc/{pid}/fd/1") == str(log) == os.readlink(f"/proc/{pid}/fd/2"))
    finally:
        os.kill(pid, signal.SIGKILL)
    exit_of(forks, pid)
    pid = forks.spawn(Spawn("builtins:print", ("hello",), output=str(log)))
    assert exit_of(forks, pid) == 0 and log.read_text() == "hello\n"


def test_a_dead_helper_is_replaced_and_its_children_are_watched_by_pid(forks):
    child = forks.spawn(Spawn("time:sleep", (1.0,)))
    helper = forks.server_pid
    assert helper is not None
    os.kill(helper, signal.SIGKILL)
    assert exit_of(forks, child) == LOST_EXIT  # its exit code died with the helper
    again = forks.spawn(Spawn("os:_exit", (0,)))
    assert forks.server_pid != helper and exit_of(forks, again) == 0
