"""The SSH backend's persistent remote shell, against a real sshd whose login shell sources a
slow ``~/.bashrc`` (the ``slow_ssh_server`` fixture): the profile runs once per shell, not once
per command; exit codes, cwd, a scrubbed environment per command, timeouts, a shell that dies,
and output that imitates the protocol."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from backend_helpers import (
    SLOW_BASHRC,
    SSHServer,
    Unavailable,
    eventually,
    host_processes_with_arg,
    make_ctx,
    start_sshd,
)

from runner.backends import resolve
from runner.backends.ssh import SSHBackend
from runner.backends.ssh_shell import MAX_INLINE_WRITE, RemoteShell, kill_command_script, loop_script
from runner.errors import BackendError

pytestmark = pytest.mark.ssh


@pytest.fixture
def slow(slow_ssh_server: SSHServer, tmp_path: Path) -> Iterator[SSHBackend]:
    ctx = make_ctx(tmp_path, run_id="slow-host", job="slow-host")
    backend = resolve(slow_ssh_server.spec(workdir=str(ctx.workdir)), ctx=ctx)
    assert isinstance(backend, SSHBackend)
    yield backend
    backend.close()


def profile_runs(backend: SSHBackend) -> int:
    """How often the remote ~/.bashrc has run so far (the sshd is on this machine)."""
    home = backend.run('printf %s "$HOME"', timeout=10).output
    runs = Path(home) / "bashrc-runs"
    return len(runs.read_text().splitlines()) if runs.exists() else 0


def shell_pid(backend: SSHBackend) -> int:
    """The pid of the persistent shell that runs the command (its parent)."""
    return int(backend.run("echo $PPID", timeout=10).output)


def test_the_profile_runs_once_per_shell_not_per_command(slow: SSHBackend) -> None:
    before = profile_runs(slow)
    first = shell_pid(slow)
    for n in range(10):
        assert slow.run(f"echo {n}", timeout=10).output == f"{n}\n"
    slow.write_file("note.txt", b"written\n")
    assert slow.read_file("note.txt") == b"written\n"
    with pytest.raises(FileNotFoundError):
        slow.read_file("missing.txt")
    assert shell_pid(slow) == first
    assert profile_runs(slow) == before == 1
    # what the profile exports is there for every command, as when it ran per command
    assert slow.run("echo $FROM_BASHRC", timeout=10).output == "yes\n"


def test_exit_codes_and_cwd_as_the_local_backend(slow: SSHBackend) -> None:
    assert (slow.run("exit 7", timeout=10).exit_code, slow.run("false", timeout=10).exit_code) == (7, 1)
    assert slow.run("no-such-command-xyz", timeout=10).exit_code == 127
    assert slow.run("kill -9 $$", timeout=10).exit_code == 137  # the command's own shell, not ours
    moved = slow.run("mkdir -p a/b && cd a && exit 4", timeout=10)
    assert (moved.exit_code, moved.cwd) == (4, f"{slow.workdir}/a")
    assert slow.run("pwd", timeout=10).output == f"{slow.workdir}/a\n"
    assert slow.run("pwd", cwd="b", timeout=10).output == f"{slow.workdir}/a/b\n"
    assert slow.run("cd /nowhere-at-all", timeout=10).cwd == f"{slow.workdir}/a/b"  # cwd= moved it


def test_environment_is_fresh_for_every_command(slow: SSHBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local-secret-value")
    ignore = ("PWD=", "OLDPWD=", "_=", "SHLVL=")

    def environment() -> list[str]:
        lines = slow.run("env | sort", timeout=10).output.splitlines()
        return [line for line in lines if not line.startswith(ignore)]

    clean = environment()
    assert slow.run("export LEAKED=1; cd /; umask 077; alias ll=ls", timeout=10).exit_code == 0
    assert slow.run('printf "%s\\n" "$X_ONCE"', env={"X_ONCE": "it's\nhere"}, timeout=10).output == "it's\nhere\n"
    assert environment() == clean
    everything = slow.run("set; env", timeout=10).output
    for absent in ("LEAKED", "X_ONCE", "_rn_", "sk-local-secret-value"):
        assert absent not in everything, absent
    assert slow.run("umask", timeout=10).output.strip() != "0077"


def test_timeout_kills_the_command_and_the_shell_stays(slow: SSHBackend) -> None:
    first = shell_pid(slow)
    seconds = 710_000 + os.getpid() % 1000
    result = slow.run(f"sleep {seconds} & echo started; sleep {seconds + 1}", timeout=1.0)
    assert (result.timed_out, result.exit_code) == (True, 124)
    assert "started" in result.output
    assert eventually(lambda: not host_processes_with_arg(str(seconds)))
    assert slow.run("echo next", timeout=10).output == "next\n"
    assert shell_pid(slow) == first


def test_a_shell_killed_mid_command_is_restarted_once_and_reported(slow: SSHBackend) -> None:
    first = shell_pid(slow)
    seconds = 730_000 + os.getpid() % 1000
    lost = slow.run(f"echo before; kill -9 $PPID; exec >/dev/null 2>&1; sleep {seconds}", timeout=20)
    assert lost.exit_code != 0 and not lost.timed_out
    assert lost.output.startswith("before\n")
    assert "the remote shell ended during this command" in lost.output
    assert eventually(lambda: not host_processes_with_arg(str(seconds)))  # the orphaned command is killed
    second = shell_pid(slow)
    assert second != first
    assert slow.run("echo fine", timeout=10).output == "fine\n"
    assert shell_pid(slow) == second  # one restart, then the new shell serves


def test_a_shell_that_died_idle_is_replaced_without_a_report(slow: SSHBackend) -> None:
    first = shell_pid(slow)
    os.kill(first, signal.SIGKILL)  # the sshd is on this machine
    assert eventually(lambda: not Path(f"/proc/{first}").exists())
    result = slow.run("echo again", timeout=10)
    assert (result.exit_code, result.output) == (0, "again\n")
    assert shell_pid(slow) != first


def test_host_gone_mid_command_is_a_backend_error(tmp_path: Path) -> None:
    folder = tmp_path / "sshd"
    folder.mkdir()
    try:
        proc, port = start_sshd(folder, bashrc=SLOW_BASHRC)
    except Unavailable as exc:
        pytest.skip(str(exc))
    try:
        key, known = str(folder / "id_ed25519"), str(folder / "known_hosts")
        server = SSHServer("127.0.0.1", port, _user(), key, known)
        ctx = make_ctx(tmp_path / "run")
        backend = resolve(server.spec(workdir=str(ctx.workdir)), ctx=ctx)
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["result"] = backend.run("sleep 30", timeout=60)
            except BackendError as exc:
                outcome["error"] = exc

        thread = threading.Thread(target=run)
        thread.start()
        time.sleep(0.5)
        _stop_sshd(proc)  # the listener and every connection it serves
        thread.join(30)
        assert not thread.is_alive()
        assert "error" in outcome, outcome
        assert "Connection refused" in str(outcome["error"])
        backend.close()
    finally:
        _stop_sshd(proc)


def test_output_that_imitates_the_protocol_changes_nothing(slow: SSHBackend) -> None:
    nonce = slow._nonce
    fakes = [
        f"__RUNNER_EXIT_{nonce}__0:0",
        f"__RUNNER_BEGIN_{nonce}__",
        f"__RUNNER_READY_{nonce}__/elsewhere",
        "__RUNNER_EXIT_0123456789abcdef__0:0",
    ]
    script = "".join(f"printf '\\n%s\\n' '{fake}'; " for fake in fakes) + "sleep 0.3; echo after; exit 3"
    result = slow.run(script, timeout=10)
    assert result.exit_code == 3 and result.output.endswith("after\n")
    for fake in fakes:
        assert fake in result.output
    # command text that looks like the framing: lines of all sorts arrive intact
    lines = ["", "  leading", "trailing  ", "back\\slash\\", "0123456789abcdef 1", "'quote\"", "x" * 5000]
    heredoc = "cat <<'EOF'\n" + "\n".join(lines) + "\nEOF"
    assert slow.run(heredoc, timeout=10).output == "\n".join(lines) + "\n"
    assert slow.run("echo clean", timeout=10).output == "clean\n"


def test_commands_cannot_read_the_protocol_stream(slow: SSHBackend) -> None:
    result = slow.run('read -r line; echo "got:$line"; cat; echo end', timeout=10)
    assert (result.output, result.timed_out) == ("got:\nend\n", False)


def test_late_output_of_a_background_job_stays_out_of_later_commands(slow: SSHBackend) -> None:
    assert slow.run("(sleep 0.4; echo late) & echo now", timeout=10).output == "now\n"
    assert slow.run("sleep 0.8; echo next", timeout=10).output == "next\n"
    assert slow.run("echo last", timeout=10).output == "last\n"


def test_file_transfers_small_big_and_binary(slow: SSHBackend) -> None:
    every_byte = bytes(range(256)) * 8
    slow.write_file("bin/all.bin", every_byte)
    assert slow.read_file("bin/all.bin") == every_byte
    big = os.urandom(MAX_INLINE_WRITE)  # too big to go inline: its own channel
    slow.write_file("bin/big.bin", big)
    assert slow.read_file("bin/big.bin") == big
    with pytest.raises(IsADirectoryError):
        slow.read_file("bin")
    with pytest.raises(OSError, match="File exists"):  # what mkdir says, as before the persistent shell
        slow.write_file("bin/all.bin/inside", b"x")


def test_overlapping_commands_get_shells_of_their_own(slow: SSHBackend) -> None:
    results: dict[int, Any] = {}

    def one(n: int) -> None:
        results[n] = slow.run(f"sleep 0.5; echo job-{n}", timeout=20)

    threads = [threading.Thread(target=one, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert {n: r.output for n, r in results.items()} == {n: f"job-{n}\n" for n in range(3)}
    pids = {shell_pid(slow) for _ in range(6)}
    assert len(pids) == 1  # one at a time again: the same (idle) shell serves


def test_close_ends_every_shell_and_the_master(slow: SSHBackend) -> None:
    shell_pid(slow)
    slow.close()
    assert not slow.control_path.exists()
    assert eventually(lambda: not host_processes_with_arg(f"ControlPath={slow.control_path}"))
    with pytest.raises(BackendError, match="closed"):
        slow.run("true", timeout=5)


def _user() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def _stop_sshd(proc: subprocess.Popen[bytes]) -> None:
    """Stop a test sshd and everything it started (connections, their sessions)."""
    children = _descendants(proc.pid)
    if proc.poll() is None:
        proc.terminate()
        proc.wait(timeout=10)
    for pid in children:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _descendants(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        kids = [pid for pid, ppid in parents.items() if ppid == parent]
        found += kids
        frontier += kids
    return found


@pytest.mark.skipif(os.path.realpath("/bin/sh").endswith("bash"), reason="/bin/sh is bash here")
def test_the_loop_on_a_host_without_bash(tmp_path: Path) -> None:
    """The persistent shell's loop run by a POSIX sh (dash: what a host without bash gets),
    on this machine through the same RemoteShell the backend uses: setsid makes the groups."""
    nonce = "abcdef123456"
    pidfile = str(tmp_path / "shell.pid")
    loop = loop_script(nonce, f"cd -- {tmp_path}", pidfile)
    shell = RemoteShell(["/bin/sh", "-c", loop], pidfile)
    try:
        assert shell.wait_ready(nonce, 10) == str(tmp_path)

        def run(script: str, timeout: float = 10, kill: Any = lambda: None) -> Any:
            return shell.exchange(script, seq=next(seqs), timeout=timeout, cap=65536, kill=kill)

        seqs = iter(range(1, 100))
        done = run("echo $BASH_VERSION; echo in-sh; exit 5")
        assert (done.pump.stream.buffer.text(), done.pump.stream.exit_code) == ("\nin-sh\n", 5)
        seconds = 720_000 + os.getpid() % 1000
        seq_of_sleep = 2
        timed = run(
            f"sleep {seconds} & echo started; sleep {seconds + 1}",
            timeout=0.5,
            kill=lambda: subprocess.run(["/bin/sh", "-c", kill_command_script(pidfile, seq_of_sleep)], check=True),
        )
        assert timed.timed_out and timed.complete and timed.pump.stream.exit_code == 137
        assert eventually(lambda: not host_processes_with_arg(str(seconds)))
        background = run("sleep 30 >/dev/null 2>&1 & echo bg")
        group = background.pump.stream.group
        assert background.pump.stream.buffer.text() == "bg\n" and group > 0
        os.killpg(group, signal.SIGKILL)
        assert run("echo $PPID").pump.stream.buffer.text() == f"{shell.proc.pid}\n"
    finally:
        shell.close()
    assert not Path(pidfile).exists()  # the shell removes its pidfile when its input ends
