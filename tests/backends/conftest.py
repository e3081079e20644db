"""Fixtures for the backend tests: real dockerd, real sshd, no mocks.

How the services are found:
- Docker: the daemon named by DOCKER_HOST (default socket) and the image
  ``$RUNNER_TEST_DOCKER_IMAGE`` (default ``runner-test:busybox``, built by .ci/services.sh).
- SSH: ``$RUNNER_TEST_SSH`` (``user@host:port``) with ``$RUNNER_TEST_SSH_KEY`` if set;
  otherwise the fixture starts its own sshd on a free 127.0.0.1 port in a temporary folder,
  with generated host and client keys.
Tests that need a service skip with the reason when it is not there.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from backend_helpers import SSHServer, make_ctx, spec_for

from backends import resolve
from backends.base import Backend, BackendContext

DOCKER_IMAGE = os.environ.get("RUNNER_TEST_DOCKER_IMAGE", "runner-test:busybox")
KINDS = ["local", "docker", "ssh"]


# -- docker ---------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def docker_image() -> str:
    """The test image name; skips when the SDK, the daemon or the image is missing."""
    try:
        import docker
    except ImportError:
        pytest.skip("docker SDK not installed")
    try:
        client = docker.from_env(timeout=10)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure means "no daemon here"
        pytest.skip(f"dockerd not reachable ({exc.__class__.__name__}); run .ci/services.sh")
    try:
        client.images.get(DOCKER_IMAGE)
    except docker.errors.ImageNotFound:
        pytest.skip(f"test image {DOCKER_IMAGE} missing; run .ci/services.sh")
    finally:
        client.close()
    return DOCKER_IMAGE


# -- ssh ------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_banner(port: int, proc: subprocess.Popen[bytes], deadline: float) -> bool:
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
# bash sources ~/.bashrc for every ssh command when SHLVL < 1; the test user's shell
# start-up files are not what these tests measure
SetEnv SHLVL=1
"""


def _start_sshd(folder: Path) -> tuple[subprocess.Popen[bytes], int]:
    sshd = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)
    if sshd is None or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        pytest.skip("sshd, ssh or ssh-keygen not installed (apt-get install openssh-server)")
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # privilege separation directory
    for name in ("host_ed25519", "id_ed25519"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / name)], check=True)
    shutil.copy(folder / "id_ed25519.pub", folder / "authorized_keys")
    port = _free_port()
    config = folder / "sshd_config"
    config.write_text(SSHD_CONFIG.format(port=port, dir=folder))
    log = open(folder / "sshd.log", "wb")  # noqa: SIM115 - lives as long as sshd
    proc = subprocess.Popen([sshd, "-D", "-e", "-f", str(config)], stdout=log, stderr=log)
    if not _wait_for_banner(port, proc, time.monotonic() + 10):
        proc.kill()
        proc.wait()
        pytest.skip(f"sshd did not start: {(folder / 'sshd.log').read_text()[-300:]}")
    return proc, port


@pytest.fixture(scope="session")
def ssh_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    folder = tmp_path_factory.mktemp("sshd")
    known_hosts = str(folder / "known_hosts")
    external = os.environ.get("RUNNER_TEST_SSH")
    if external:
        if shutil.which("ssh") is None:
            pytest.skip("ssh client not installed")
        userhost, _, port = external.rpartition(":")
        user, _, host = userhost.rpartition("@")
        yield SSHServer(host, int(port), user, os.environ.get("RUNNER_TEST_SSH_KEY"), known_hosts)
        return
    proc, port = _start_sshd(folder)
    user = pwd.getpwuid(os.getuid()).pw_name
    try:
        yield SSHServer("127.0.0.1", port, user, str(folder / "id_ed25519"), known_hosts)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# -- backends -------------------------------------------------------------------------------
@pytest.fixture
def make_backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[..., tuple[Backend, BackendContext]]]:
    """Factory: ``make_backend(kind, **spec_extra)`` -> (backend, ctx); closed at teardown."""
    made: list[Backend] = []

    def make(kind: str, *, run_id: str = "test-run", **extra: Any) -> tuple[Backend, BackendContext]:
        ctx = make_ctx(tmp_path / f"b{len(made)}", run_id=run_id, job="backend-tests")
        backend = resolve({**spec_for(kind, request, ctx.workdir), **extra}, ctx=ctx)
        made.append(backend)
        return backend, ctx

    yield make
    for backend in made:
        backend.close()
