"""runner.host.procs with real processes: a tree killed as a tree, pid reuse told apart by start time,
a group whose leader is gone, and the two-stage stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from runner.host import procs

# a parent that starts a child in its own session (as backend commands run) which starts a
# grandchild; each prints its pid, then sleeps
TREE = """
import subprocess, sys, time
level = int(sys.argv[1])
print(__import__("os").getpid(), flush=True)
if level < 2:
    subprocess.Popen([sys.executable, "-c", sys.argv[2], str(level + 1), sys.argv[2]], start_new_session=level == 0)
time.sleep(60)
"""
STUBBORN = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
)


def _tree() -> tuple[subprocess.Popen[str], list[int]]:
    proc = subprocess.Popen([sys.executable, "-c", TREE, "0", TREE], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    pids = [int(proc.stdout.readline()) for _ in range(3)]
    return proc, pids


def _wait_gone(pids: list[int], starts: list[str | None], timeout: float = 5.0) -> list[int]:
    deadline = time.monotonic() + timeout
    left = pids
    while time.monotonic() < deadline:
        left = [p for p, s in zip(pids, starts, strict=True) if procs.running(p, s)]
        if not left:
            break
        time.sleep(0.02)
    return left


def test_descendants_children_first() -> None:
    proc, pids = _tree()
    try:
        assert procs.descendants(proc.pid) == pids[1:]
        assert pids[0] == proc.pid
    finally:
        procs.kill_tree(proc.pid, 0)
        proc.wait()


def test_kill_tree_reaches_every_descendant_also_in_other_sessions() -> None:
    proc, pids = _tree()
    starts = [procs.start_time(p) for p in pids]
    assert all(starts)
    assert procs.kill_tree(proc.pid, 1.0)
    proc.wait(timeout=5)
    assert _wait_gone(pids, starts) == []
    assert proc.returncode == -signal.SIGTERM


@pytest.mark.parametrize("own_session", [False, True])
def test_the_root_is_signalled_before_its_descendants(own_session: bool) -> None:
    """A worker hears serve's SIGTERM before its commands die of it (or it could take a command
    killed by the shutdown for one that failed): the root, or its group, comes first."""
    proc = subprocess.Popen(
        [sys.executable, "-c", TREE, "0", TREE], stdout=subprocess.PIPE, text=True, start_new_session=own_session
    )
    assert proc.stdout is not None
    pids = [int(proc.stdout.readline()) for _ in range(3)]
    try:
        targets = procs.ProcessTree(proc.pid).targets()
        root = (procs.Target.GROUP, proc.pid) if own_session else (procs.Target.PROCESS, proc.pid)
        assert targets == [root, (procs.Target.GROUP, pids[1])]  # the grandchild is in its parent's session
    finally:
        procs.kill_tree(proc.pid, 0)
        proc.wait()


def test_kill_tree_sigkills_what_ignores_sigterm_after_the_grace() -> None:
    proc = subprocess.Popen([sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    started = time.monotonic()
    assert procs.kill_tree(proc.pid, 0.3)
    assert proc.wait(timeout=5) == -signal.SIGKILL
    assert time.monotonic() - started >= 0.3


def test_a_reused_pid_is_told_apart_by_its_start_time() -> None:
    proc = subprocess.Popen(["sleep", "60"])
    try:
        start = procs.start_time(proc.pid)
        assert start is not None
        assert procs.pid_alive(proc.pid, start)
        other = str(int(start) + 1)  # the same pid, as a process started later would have it
        assert not procs.pid_alive(proc.pid, other)
        assert not procs.kill_tree(proc.pid, 0, start=other)
        procs.ProcessTree(proc.pid, start=other).signal(signal.SIGKILL)
        time.sleep(0.1)
        assert proc.poll() is None, "a process that only shares the pid must not be signalled"
    finally:
        proc.kill()
        proc.wait()
    assert not procs.pid_alive(proc.pid, start)
    assert not procs.kill_tree(proc.pid, 0, start=start)


def test_a_group_outlives_its_leader() -> None:
    # the leader of a new session starts a sleeper and exits (a backend command's background child)
    code = "import subprocess; print(subprocess.Popen(['sleep', '60']).pid, flush=True)"
    leader = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    leader_start = procs.start_time(leader.pid)
    assert leader.stdout is not None
    sleeper = int(leader.stdout.readline())
    sleeper_start = procs.start_time(sleeper)
    leader.wait(timeout=5)
    assert procs.group_alive(leader.pid)
    assert not procs.kill_tree(leader.pid, 0, start=leader_start, group=leader.pid)
    assert _wait_gone([sleeper], [sleeper_start]) == []


def test_two_stage_stop_first_sets_then_interrupts_and_restores() -> None:
    assert threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGTERM)
    stop = threading.Event()
    with pytest.raises(KeyboardInterrupt), procs.two_stage_stop(stop):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100):
            if stop.is_set():
                break
            time.sleep(0.01)
        assert stop.is_set()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc")
def test_kill_marked_finds_processes_by_their_environment_only():
    mark = f"m{os.getpid()}-{time.monotonic_ns()}"
    env = dict(os.environ, PROCS_TEST_MARK=mark)
    other = dict(os.environ, PROCS_TEST_MARK=mark + "-other")
    ours = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env, start_new_session=True)
    theirs = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=other, start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while procs.marked("PROCS_TEST_MARK", mark) != [ours.pid] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert procs.marked("PROCS_TEST_MARK", mark) == [ours.pid]
        assert procs.kill_marked("PROCS_TEST_MARK", mark) == 1
        assert ours.wait(timeout=5) == -signal.SIGKILL
        assert theirs.poll() is None and procs.marked("PROCS_TEST_MARK", mark) == []
    finally:
        for proc in (ours, theirs):
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_pid_zero_is_never_alive_nor_signalled() -> None:
    """A remote attempt's handle has pid 0: kill(0, ...) would signal this very process group."""
    assert not procs.pid_alive(0, None) and not procs.pid_alive(-1, None)
    assert procs.kill_tree(0, 0) is False and procs.kill_tree(-5, 0.1) is False


@pytest.mark.parametrize("first_exception", [False, True])
def test_a_signal_that_reaches_another_thread_is_handled_while_the_main_thread_waits(first_exception) -> None:
    """A run's main thread waiting for its subagents (or parallel tools) with ``future_results``: a
    stop signal the kernel delivered to one of their threads still sets the run's stop while they
    work. (A plain ``wait`` or ``result()`` would run the handler only after they all ended.)"""
    from concurrent.futures import ThreadPoolExecutor

    stop = threading.Event()
    release = threading.Event()
    handled_while_working: list[bool] = []
    ready = threading.Barrier(3)

    def work() -> None:
        ready.wait(10)
        release.wait(10)

    def aim_at_a_worker(target: int) -> None:
        ready.wait(10)
        time.sleep(0.2)  # the main thread is inside future_results by now
        signal.pthread_kill(target, signal.SIGUSR1)

    def on_signal(signum, frame) -> None:
        handled_while_working.append(not release.is_set())
        stop.set()
        release.set()

    previous = signal.signal(signal.SIGUSR1, on_signal)
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            futures = [pool.submit(work), pool.submit(work)]
            worker_ids = [t.ident for t in pool._threads]  # the pool's own threads
            assert len(worker_ids) == 2 and all(worker_ids)
            aimer = threading.Thread(target=aim_at_a_worker, args=(worker_ids[0],))
            aimer.start()
            timer = threading.Timer(8, release.set)  # without the handler the workers end after 8 s
            timer.start()
            assert procs.future_results(futures, first_exception=first_exception) == [None, None]
            timer.cancel()
            aimer.join(10)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert stop.is_set() and handled_while_working == [True]


def test_future_results_raise_the_first_failure_without_waiting_for_the_rest() -> None:
    from concurrent.futures import ThreadPoolExecutor

    release = threading.Event()

    def fails() -> None:
        raise ValueError("boom")

    with ThreadPoolExecutor(max_workers=2) as pool:
        slow, bad = pool.submit(release.wait, 10), pool.submit(fails)
        try:
            with pytest.raises(ValueError, match="boom"):
                procs.future_results([slow, bad], first_exception=True)
            assert not slow.done()  # raised while the other one still worked
        finally:
            release.set()
        assert procs.future_results([slow]) == [True]
