"""The backend contract: local, local in its sandbox, docker and ssh give the same semantics
(DESIGN §2, issues 4 and 29)."""

from __future__ import annotations

import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from backend_helpers import eventually, host_processes_with_arg, make_ctx, spec_for

from runner.backends import resolve
from runner.backends.base import Backend
from runner.errors import BackendError
from runner.host.procs import Cut

PARAMS = [
    pytest.param("local"),
    pytest.param("sandbox"),
    pytest.param("docker", marks=pytest.mark.docker),
    pytest.param("ssh", marks=pytest.mark.ssh),
]
CAP = 64 * 1024


@pytest.fixture(scope="class", params=PARAMS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="class")
def backend(kind: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    """One backend per kind, shared by the tests of the class (a container start is slow)."""
    ctx = make_ctx(tmp_path_factory.mktemp(f"contract-{kind}"), kind, run_id="contract", job="contract")
    shared = resolve(spec_for(kind, request, ctx.workdir), ctx=ctx)
    yield shared
    shared.close()


def run(backend: Backend, command: str, timeout: float = 20, **kw: Any) -> Any:
    """Run from the workdir, whatever an earlier test left as the cwd."""
    kw.setdefault("cwd", backend.workdir)
    return backend.run(command, timeout=timeout, **kw)


def unique_seconds() -> int:
    return random.randint(700_000, 799_999)


def count_in_backend(backend: Backend, arg: str) -> int:
    """Processes inside the backend with ``arg`` as an argument (works with busybox too)."""
    result = run(backend, f"cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n' | grep -c '^{arg}$'")
    return int(result.output.strip() or 0)


class TestContract:
    def test_satisfies_the_protocol_and_says_where_it_runs(self, backend: Backend, kind: str) -> None:
        assert isinstance(backend, Backend)
        assert backend.is_local is (kind == "local")

    def test_echo_and_exit_codes(self, backend: Backend) -> None:
        ok = run(backend, "echo hello")
        assert (ok.exit_code, ok.output, ok.timed_out) == (0, "hello\n", False)
        assert run(backend, "exit 7").exit_code == 7
        assert run(backend, "false").exit_code == 1
        assert run(backend, "no-such-command-xyz").exit_code == 127
        assert ok.duration_s >= 0 and ok.cwd == backend.workdir

    def test_stdout_and_stderr_combined_in_order(self, backend: Backend) -> None:
        result = run(backend, "echo one; echo two >&2; echo three; echo four >&2; printf five")
        assert result.output == "one\ntwo\nthree\nfour\nfive"

    def test_stdin_is_closed(self, backend: Backend) -> None:
        result = run(backend, "cat; echo done", timeout=10)
        assert (result.output, result.timed_out) == ("done\n", False)

    def test_cwd_persists_environment_does_not(self, backend: Backend) -> None:
        first = run(backend, "mkdir -p sub/deeper && cd sub && export RUNNER_T=1 && echo $RUNNER_T")
        assert first.output == "1\n"
        assert first.cwd == f"{backend.workdir}/sub"
        second = backend.run("pwd; echo ${RUNNER_T:-unset}", timeout=10)
        assert second.output == f"{backend.workdir}/sub\nunset\n"
        relative = backend.run("pwd", cwd="deeper", timeout=10)
        assert relative.output == f"{backend.workdir}/sub/deeper\n"
        with_env = backend.run("echo $ONLY_NOW", env={"ONLY_NOW": "it's here"}, timeout=10)
        assert with_env.output == "it's here\n"
        assert backend.run("echo ${ONLY_NOW:-gone}", timeout=10).output == "gone\n"

    def test_cd_survives_exit(self, backend: Backend) -> None:
        result = run(backend, "mkdir -p ex && cd ex && exit 3")
        assert (result.exit_code, result.cwd) == (3, f"{backend.workdir}/ex")

    def test_timeout_kills_the_whole_tree(self, backend: Backend) -> None:
        seconds = unique_seconds()
        started = time.monotonic()
        result = run(backend, f"sleep {seconds} & echo started; sleep {seconds + 1}", timeout=1.5)
        assert result.timed_out and result.exit_code == 124
        assert "started" in result.output
        assert time.monotonic() - started < 20  # cut at 1.5 s, not after the sleeps
        assert eventually(lambda: count_in_backend(backend, str(seconds)) == 0)
        assert run(backend, "echo still usable").output == "still usable\n"

    def test_big_output_keeps_head_and_tail(self, backend: Backend) -> None:
        result = run(backend, "printf START; head -c 5000000 /dev/zero | tr '\\0' x; printf END", timeout=60)
        assert result.exit_code == 0
        assert result.output.startswith("START") and result.output.endswith("END")
        match = re.search(r"\n\[\.\.\. (\d+) bytes of output cut[^\n]*\]\n", result.output)
        assert match, result.output[CAP // 2 - 50 : CAP // 2 + 150]
        kept = len(result.output) - len(match.group(0))
        assert kept + int(match.group(1)) == 5_000_008  # nothing lost without saying so
        assert CAP - 200 < kept <= CAP

    def test_invalid_utf8_is_replaced(self, backend: Backend) -> None:
        result = run(backend, "printf 'ok \\377\\376 \\000 end\\n'")
        assert result.output == "ok \ufffd\ufffd \x00 end\n"

    def test_file_round_trips(self, backend: Backend) -> None:
        binary = bytes(range(256)) * 64
        backend.write_file(f"{backend.workdir}/bin/all-bytes.bin", binary)
        assert backend.read_file(f"{backend.workdir}/bin/all-bytes.bin") == binary
        name = "ünïcödé dir/snow ☃ 名前.txt"
        backend.write_file(f"{backend.workdir}/{name}", "grüße\n".encode())
        assert backend.read_file(f"{backend.workdir}/{name}") == "grüße\n".encode()
        assert run(backend, f"cat '{name}'").output == "grüße\n"
        big = os.urandom(10 * 1024 * 1024)
        backend.write_file(f"{backend.workdir}/big.bin", big)
        assert backend.read_file(f"{backend.workdir}/big.bin") == big
        assert run(backend, "wc -c < big.bin").output.strip() == str(len(big))

    def test_file_paths_relative_to_cwd_and_errors(self, backend: Backend) -> None:
        run(backend, "mkdir -p rel && cd rel")
        backend.write_file("note.txt", b"relative")
        assert backend.read_file("note.txt") == b"relative"
        assert run(backend, "cat rel/note.txt").output == "relative"
        with pytest.raises(FileNotFoundError):
            backend.read_file(f"{backend.workdir}/does-not-exist")
        with pytest.raises(IsADirectoryError):
            backend.read_file(backend.workdir)

    def test_four_concurrent_commands(self, backend: Backend) -> None:
        results: dict[int, Any] = {}

        def one(n: int) -> None:
            results[n] = run(backend, f"sleep 1; echo job-{n}", timeout=20)

        started = time.monotonic()
        threads = [threading.Thread(target=one, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert {n: (r.exit_code, r.output) for n, r in results.items()} == {n: (0, f"job-{n}\n") for n in range(4)}
        assert time.monotonic() - started < 3.5  # in parallel, not one after another

    def test_nothing_left_after_close(self, kind: str, make_backend: Callable[..., Any]) -> None:
        fresh, _ = make_backend(kind)
        seconds = unique_seconds()
        fresh.run(f"sleep {seconds} >/dev/null 2>&1 & sleep {seconds + 1} & echo bg", timeout=10)
        assert count_in_backend(fresh, str(seconds)) == 1
        fresh.close()
        fresh.close()  # idempotent
        assert_nothing_left(kind, fresh, seconds)
        with pytest.raises(BackendError):
            fresh.run("echo closed", timeout=5)


def assert_nothing_left(kind: str, backend: Any, seconds: int) -> None:
    if kind == "docker":
        import docker

        client = docker.from_env()
        try:
            with pytest.raises(docker.errors.NotFound):
                client.containers.get(backend.name)
        finally:
            client.close()
        return
    if kind == "ssh":
        assert not backend.control_path.exists()
        assert eventually(lambda: not host_processes_with_arg(f"ControlPath={backend.control_path}"))
    # local and ssh (the test sshd is on this machine): the background jobs are gone
    for arg in (str(seconds), str(seconds + 1)):
        assert eventually(lambda arg=arg: not host_processes_with_arg(arg)), arg  # type: ignore[misc]


# -- the local backend's wait ------------------------------------------------------------------
def test_exited_within_reaps_a_command_that_ends_and_leaves_one_that_does_not() -> None:
    import subprocess
    import sys

    from runner.backends.local import exited_within

    quick = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    assert exited_within(quick, 60.0)
    assert quick.returncode == 3  # reaped, with its exit code
    slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert not exited_within(slow, 0.2)
        assert slow.poll() is None  # still running: the caller decides what to do with it
        slow.kill()
        assert exited_within(slow, 3000 * 86400.0)  # beyond poll()'s int milliseconds: no OverflowError
    finally:
        slow.kill()
        slow.wait()


@pytest.mark.parametrize("kind", PARAMS)
def test_the_runs_cut_ends_the_command_running(kind: str, request: pytest.FixtureRequest, tmp_path: Any) -> None:
    """``runner runs cancel`` (or the run's fence) sets the run's cut: the command waited for ends
    as at its timeout, within the cut's grace (local: SIGTERM, SIGKILL after it; docker and ssh:
    the group kill through a second channel), and nothing of it is left on the machine."""
    cut = Cut(grace=1.0)
    ctx = make_ctx(tmp_path, kind, run_id="cut", job="cut", cut=cut)
    backend = resolve(spec_for(kind, request, ctx.workdir), ctx=ctx)
    try:
        seconds = unique_seconds()
        timer = threading.Timer(0.5, cut.event.set)
        timer.start()
        started = time.monotonic()
        result = run(backend, f"sleep {seconds}; echo never", timeout=60)
        took = time.monotonic() - started
        assert "never" not in result.output and result.exit_code != 0
        assert took < 0.5 + cut.grace + 1, f"the command ended {took:.1f}s after it started"
        assert eventually(lambda: not host_processes_with_arg(str(seconds)))
    finally:
        backend.close()
