"""SSH-specific behaviour against a real sshd (started by the fixture on a free port)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from backend_helpers import SSHServer, make_ctx

from runner.backends import resolve
from runner.backends.ssh import SUN_PATH_MAX, control_path
from runner.errors import BackendError, UsageError

pytestmark = pytest.mark.ssh


def master_pid(backend: Any) -> int | None:
    check = subprocess.run(
        [*backend._argv, "-O", "check", backend.spec.host], capture_output=True, text=True, timeout=10
    )
    match = re.search(r"pid=(\d+)", check.stderr)
    return int(match.group(1)) if check.returncode == 0 and match else None


def test_commands_share_one_master_connection(make_backend: Callable[..., Any]) -> None:
    backend, _ = make_backend("ssh")
    first = master_pid(backend)
    assert first is not None, "no master after connecting"
    for _ in range(3):
        assert backend.run("true", timeout=10).exit_code == 0
    backend.write_file("f.txt", b"data")
    assert backend.read_file("f.txt") == b"data"
    assert master_pid(backend) == first
    assert len(str(backend.control_path)) + 17 <= SUN_PATH_MAX
    backend.close()
    assert master_pid(backend) is None and not backend.control_path.exists()


def test_wrong_key_fails_fast(ssh_server: SSHServer, tmp_path: Path) -> None:
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    started = time.monotonic()
    with pytest.raises(BackendError, match="Permission denied"):
        resolve(ssh_server.spec(key=str(stranger)), ctx=make_ctx(tmp_path))
    assert time.monotonic() - started < 5


def test_nothing_listening_fails_fast(ssh_server: SSHServer, tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(BackendError, match="Connection refused"):
        resolve(ssh_server.spec(port=port), ctx=make_ctx(tmp_path))
    assert time.monotonic() - started < 5


def test_unknown_host_key_refused_when_strict(ssh_server: SSHServer, tmp_path: Path) -> None:
    spec = ssh_server.spec(strict_host_key_checking="yes", known_hosts_file=str(tmp_path / "empty_known_hosts"))
    with pytest.raises(BackendError, match="(?i)host key"):
        resolve(spec, ctx=make_ctx(tmp_path))


def test_missing_remote_workdir(ssh_server: SSHServer, tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="remote workdir"):
        resolve(ssh_server.spec(workdir=str(tmp_path / "nowhere")), ctx=make_ctx(tmp_path))


def test_default_workdir_is_the_remote_home(ssh_server: SSHServer, tmp_path: Path) -> None:
    with resolve(ssh_server.spec(), ctx=make_ctx(tmp_path)) as backend:
        assert backend.workdir == backend.run('printf %s "$HOME"', timeout=10).output


def test_remote_exit_255_is_a_command_result(make_backend: Callable[..., Any]) -> None:
    backend, _ = make_backend("ssh")
    result = backend.run("exit 255", timeout=10)
    assert (result.exit_code, result.timed_out) == (255, False)


def test_invalid_env_name_is_refused(make_backend: Callable[..., Any]) -> None:
    backend, _ = make_backend("ssh")
    with pytest.raises(UsageError):
        backend.run("true", env={"BAD NAME; rm -rf /": "x"}, timeout=10)


def test_control_path_falls_back_to_tmp_when_home_is_long(tmp_path: Path) -> None:
    long_home = tmp_path / ("h" * 120)
    path = control_path(long_home, "abcdef123456")
    try:
        assert path.parent.name.startswith("runner-ssh-") and not str(path).startswith(str(long_home))
        assert len(str(path)) + 17 <= SUN_PATH_MAX
        assert path.parent.stat().st_mode & 0o777 == 0o700
    finally:
        shutil.rmtree(path.parent)
    short_home = Path(tempfile.mkdtemp(prefix="rh"))
    try:
        assert control_path(short_home, "abcdef123456") == short_home / "run" / "ssh-abcdef123456"
    finally:
        shutil.rmtree(short_home)


def test_a_jobs_workdir_is_the_remote_folder(ssh_server: SSHServer, tmp_path: Path) -> None:
    """jobs.yaml's job-level ``workdir`` on an ssh backend is where the remote commands run (it
    used to be ignored); a different ``backend.workdir`` beside it is a one-line error."""
    from runner.config.jobs import load_jobs

    remote = tmp_path / "remote-work"  # sshd runs on this machine: a folder here is "remote"
    remote.mkdir()
    spec = ", ".join(f"{k}: {v}" for k, v in ssh_server.spec().items())
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(f"jobs:\n  r:\n    prompt: hi\n    workdir: {remote}\n    backend: {{{spec}}}\n")
    job = load_jobs(jobs).jobs["r"]
    with resolve(job.spec.backend, ctx=make_ctx(tmp_path, run_id="ssh-workdir", job="r")) as backend:
        assert backend.run("pwd", timeout=30).output.strip() == str(remote)
    jobs.write_text(f"jobs:\n  r:\n    prompt: hi\n    workdir: {remote}\n    backend: {{{spec}, workdir: /srv}}\n")
    with pytest.raises(UsageError, match="workdir .* and backend.workdir '/srv' differ"):
        load_jobs(jobs)
