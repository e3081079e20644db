"""Helpers shared by the backend tests (imported by conftest.py and the test modules)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runner.backends.base import BackendContext


class Unavailable(Exception):
    """A service the tests need is not on this machine; the message says why."""


@dataclass(frozen=True)
class SSHServer:
    host: str
    port: int
    user: str
    key: str | None
    known_hosts: str

    def spec(self, **extra: Any) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "type": "ssh",
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "known_hosts_file": self.known_hosts,
        }
        if self.key:
            spec["key"] = self.key
        spec.update(extra)
        return spec


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_banner(port: int, proc: subprocess.Popen[bytes], deadline: float) -> bool:
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                if conn.recv(64).startswith(b"SSH-"):
                    return True
        except OSError:
            time.sleep(0.05)
    return False


SSHD_CONFIG = """\
Port {port}
ListenAddress 127.0.0.1
HostKey {dir}/host_ed25519
PidFile {dir}/sshd.pid
AuthorizedKeysFile {dir}/authorized_keys
UsePAM no
StrictModes no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin prohibit-password
MaxSessions 64
MaxStartups 64
LogLevel ERROR
"""
# bash sources ~/.bashrc for every ssh session when SHLVL < 1; the test user's shell
# start-up files are not what most tests look at
QUIET_PROFILE = "SetEnv SHLVL=1\n"
# a host with a real shell profile: no SHLVL, and a home of the fixture's own (sshd sets HOME
# before SetEnv applies, so the login shell sources {home}/.bashrc, not the real user's)
OWN_HOME = "SetEnv HOME={home}\n"
#: the profile of the "slow host": what `pyenv init` costs, an export, a count of its runs
SLOW_BASHRC = 'sleep 0.15\nexport FROM_BASHRC=yes\necho x >> "$HOME/bashrc-runs"\n'


def start_sshd(folder: Path, *, bashrc: str | None = None) -> tuple[subprocess.Popen[bytes], int]:
    """A private sshd; with ``bashrc``, the login shell sources it (from ``folder/home``) per session."""
    sshd = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)
    if sshd is None or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        raise Unavailable("sshd, ssh or ssh-keygen not installed (apt-get install openssh-server)")
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # privilege separation directory
    for name in ("host_ed25519", "id_ed25519"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / name)], check=True)
    shutil.copy(folder / "id_ed25519.pub", folder / "authorized_keys")
    port = free_port()
    config = folder / "sshd_config"
    if bashrc is None:
        config.write_text(SSHD_CONFIG.format(port=port, dir=folder) + QUIET_PROFILE)
    else:
        home = folder / "home"
        home.mkdir(exist_ok=True)
        (home / ".bashrc").write_text(bashrc)
        config.write_text(SSHD_CONFIG.format(port=port, dir=folder) + OWN_HOME.format(home=home))
    log = open(folder / "sshd.log", "wb")  # noqa: SIM115 - lives as long as sshd
    proc = subprocess.Popen([sshd, "-D", "-e", "-f", str(config)], stdout=log, stderr=log)
    if not wait_for_banner(port, proc, time.monotonic() + 10):
        proc.kill()
        proc.wait()
        raise Unavailable(f"sshd did not start: {(folder / 'sshd.log').read_text()[-300:]}")
    return proc, port


def make_ctx(root: Path, kind: str = "local", **extra: Any) -> BackendContext:
    """A context in ``root/work``; kind ``sandbox`` is the local backend with a sandbox plan (the
    workdir writable, the rest of the machine read-only), as every agent run gets by default."""
    workdir = root / "work"
    workdir.mkdir(parents=True, exist_ok=True)
    if kind == "sandbox":
        from runner.backends.sandbox import Plan

        extra.setdefault("sandbox", Plan(workdir=str(workdir)))
    return BackendContext(workdir=workdir, home=root / "home", **extra)


def spec_for(kind: str, request: pytest.FixtureRequest, workdir: Path) -> dict[str, Any]:
    if kind in ("local", "sandbox"):
        return {"type": "local"}
    if kind == "docker":
        return {"type": "docker", "image": request.getfixturevalue("docker_image")}
    server: SSHServer = request.getfixturevalue("ssh_server")
    return server.spec(workdir=str(workdir))


def host_processes_with_arg(arg: str) -> list[int]:
    """Live processes on this machine with ``arg`` as one of their arguments."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                args = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if arg.encode() in args:
                found.append(int(entry.name))
    return found


def eventually(check: Callable[[], bool], within: float = 3.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()
