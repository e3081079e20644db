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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from backend_helpers import SLOW_BASHRC, SSHServer, Unavailable, make_ctx, spec_for, start_sshd

from runner.backends import resolve
from runner.backends.base import Backend, BackendContext

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
    try:
        proc, port = start_sshd(folder)
    except Unavailable as exc:
        pytest.skip(str(exc))
    user = pwd.getpwuid(os.getuid()).pw_name
    try:
        yield SSHServer("127.0.0.1", port, user, str(folder / "id_ed25519"), known_hosts)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def slow_ssh_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    """An sshd of our own whose login shell sources a slow ``~/.bashrc`` (``SLOW_BASHRC``) for
    every session, as a host with ``pyenv init`` in its profile does. The remote ``$HOME`` is a
    folder of the fixture's; ``$HOME/bashrc-runs`` gets a line per run of the profile."""
    if os.environ.get("RUNNER_TEST_SSH"):
        pytest.skip("needs the fixture's own sshd (RUNNER_TEST_SSH names an external one)")
    folder = tmp_path_factory.mktemp("sshd-slow")
    try:
        proc, port = start_sshd(folder, bashrc=SLOW_BASHRC)
    except Unavailable as exc:
        pytest.skip(str(exc))
    user = pwd.getpwuid(os.getuid()).pw_name
    try:
        yield SSHServer("127.0.0.1", port, user, str(folder / "id_ed25519"), str(folder / "known_hosts"))
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
        ctx = make_ctx(tmp_path / f"b{len(made)}", kind, run_id=run_id, job="backend-tests")
        backend = resolve({**spec_for(kind, request, ctx.workdir), **extra}, ctx=ctx)
        made.append(backend)
        return backend, ctx

    yield make
    for backend in made:
        backend.close()
