"""Docker backend: one hardened, idle container per run; every command is a ``docker exec``.

The container starts with an idle loop as its only process and is removed at ``close()``.
Hardening is not optional: all capabilities dropped, no-new-privileges, a pids limit, no
network unless the spec asks, tmpfs ``/tmp``, the invoking uid:gid, and never the Docker
socket. The job's workdir is bind-mounted read-write at ``/workspace``; the runner's control
files inside it (jobs.yaml, templates, skills, ...) are bind-mounted over themselves read-only.

Start-up: the backends of one process share one client and remember which images they found
present (``DAEMON``), and the container is created and started through the low-level API, so a
container costs two API calls (create, start) once the process has opened its first.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from itertools import count
from pathlib import Path
from typing import Any, TypeVar

import docker
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.types import Mount
from docker.utils.socket import frames_iter
from requests.exceptions import RequestException

from runner.backends.base import (
    READ_SCRIPT,
    WRITE_SCRIPT,
    BackendContext,
    CwdState,
    ExecResult,
    StreamPump,
    file_error,
    finish_or_kill,
    kill_group_script,
    make_result,
    new_nonce,
    pidfile_for,
    wrap_command,
    wrap_remote,
)
from runner.backends.docker_spec import WORKSPACE, DockerSpec, HostMount, check_not_docker_socket
from runner.errors import BackendError

log = logging.getLogger(__name__)

IDLE = "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"
LABEL_RUN, LABEL_JOB, LABEL_MANAGED = "runner.run_id", "runner.job", "runner.managed"
#: the RUNNER_HOME whose run made the container: a home's cleanup leaves other homes' containers
LABEL_HOME = "runner.home"
PIDS_LIMIT = 256
CONNECT_TIMEOUT = 10  # seconds to reach the daemon at all
API_TIMEOUT = 60  # seconds for one API call (streams are not limited)
T = TypeVar("T")
_TRANSPORT_ERRORS = (DockerException, RequestException, OSError)


def _read_only_mounts(host_dir: Path, protected: tuple[Path, ...]) -> list[Mount]:
    """The runner's control files inside the workdir, mounted over themselves read-only."""
    out = []
    for path in protected:
        try:
            rel = path.resolve().relative_to(host_dir)
        except ValueError:
            continue
        if rel.parts and path.exists():
            out.append(Mount(f"{WORKSPACE}/{rel.as_posix()}", str(path.resolve()), type="bind", read_only=True))
    return out


def _daemon_key() -> tuple[str, ...]:
    """What names the daemon a client talks to (``docker.from_env`` reads these)."""
    return tuple(os.environ.get(name, "") for name in ("DOCKER_HOST", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH"))


def connect() -> docker.DockerClient:
    """A new client for the daemon named by DOCKER_HOST (or the default socket), checked with a ping."""
    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        client = docker.from_env(timeout=CONNECT_TIMEOUT, max_pool_size=16)
        client.ping()
    except _TRANSPORT_ERRORS as exc:
        raise BackendError(f"docker: cannot reach the Docker daemon at {where} ({_explain(exc)})") from exc
    client.api.timeout = API_TIMEOUT
    return client


def ensure_image(client: docker.DockerClient, image: str, pull: str) -> None:
    if pull != "always":
        try:
            client.api.inspect_image(image)
            return
        except ImageNotFound:
            if pull == "never":
                raise BackendError(f"docker: image {image!r} is not present and pull is 'never'") from None
        except _TRANSPORT_ERRORS as exc:
            raise BackendError(f"docker: cannot inspect image {image!r} ({_explain(exc)})") from exc
    try:
        client.images.pull(image)
    except _TRANSPORT_ERRORS as exc:
        raise BackendError(f"docker: cannot pull image {image!r} ({_explain(exc)})") from exc


class Daemon:
    """What a process reuses between the Docker backends it opens (serve's in-process runs, a
    kanban worker, a test session): one client per daemon, whose keep-alive connection and
    negotiated API version are kept, and the images already found present (``pull: missing`` or
    ``never``), so the next container costs no ping, no version query and no image inspection.
    A forked child starts afresh (a client's sockets are not shared between processes); an image
    removed meanwhile is noticed when the container cannot be created, then inspected again."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: dict[tuple[object, ...], docker.DockerClient] = {}
        self._images: set[tuple[object, ...]] = set()

    def client(self) -> docker.DockerClient:
        key = (os.getpid(), *_daemon_key())
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                client = self._clients[key] = connect()
            return client

    def ensure_image(self, client: docker.DockerClient, image: str, pull: str) -> None:
        key = (os.getpid(), *_daemon_key(), image)
        if pull != "always" and key in self._images:
            return
        ensure_image(client, image, pull)
        self._images.add(key)

    def forget_image(self, image: str) -> None:
        self._images.discard((os.getpid(), *_daemon_key(), image))

    def reset(self) -> None:
        """Close every client and forget every image (tests; a process that wants a fresh start)."""
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
            self._images = set()
        for client in clients:
            client.close()


DAEMON = Daemon()


class DockerBackend:
    is_local: bool = False

    def __init__(self, spec: DockerSpec, ctx: BackendContext):
        self.ctx = ctx
        self.workdir = WORKSPACE
        self.spec = spec
        self._cwd = CwdState(WORKSPACE)
        self._nonce = new_nonce()
        self._seq = count(1)
        self._lock = threading.Lock()
        self._closed = False
        self._mounts = [_bind(m) for m in spec.host_mounts(Path(ctx.workdir))]
        host_dir = Path(ctx.workdir).resolve()
        if not host_dir.is_dir():
            raise BackendError(f"docker backend: workdir {host_dir} does not exist")
        check_not_docker_socket(host_dir, what="workdir")
        self.name = f"runner-{re.sub(r'[^a-zA-Z0-9_.-]+', '-', ctx.job or 'adhoc')[:40]}-{self._nonce}"
        self._client = DAEMON.client()  # shared by the process's backends: not closed here
        self._api = self._client.api
        DAEMON.ensure_image(self._client, spec.image, spec.pull)
        self.container_id = self._start(host_dir)

    # -- protocol -------------------------------------------------------------------------
    def run(
        self,
        command: str,
        *,
        cwd: str | None = None,
        timeout: float,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        started = time.monotonic()
        pidfile = pidfile_for(self._nonce, next(self._seq))
        script = wrap_command(command, self._cwd.resolve(cwd), self._nonce)
        script = wrap_remote(script, pidfile=pidfile, nonce=self._nonce)
        exec_id = self._exec_create(["/bin/sh", "-c", script], env=env)
        stream = self._call(lambda: self._api.exec_start(exec_id, stream=True))
        pump = StreamPump(stream, self._nonce, self.ctx.output_cap)
        timed_out = finish_or_kill(
            pump,
            timeout,
            kill=lambda: self._exec_quiet(kill_group_script(pidfile)),
            abort=lambda: _close_stream(stream),
            cut=self.ctx.cut,
        )
        _close_stream(stream)  # a background child may still hold it open
        code = pump.stream.exit_code
        if code is None and not timed_out:
            if pump.error is not None and self._closed:
                raise BackendError(f"docker: container {self.name} was closed while a command ran")
            code = self._exit_code(exec_id)
        return make_result(pump, self._nonce, self._cwd, self._lock, code, timed_out, started)

    def read_file(self, path: str) -> bytes:
        exec_id = self._exec_create(["/bin/sh", "-c", READ_SCRIPT, "sh", self._cwd.absolute(path)])
        out, err = self._call(lambda: self._api.exec_start(exec_id, demux=True))
        if self._exit_code(exec_id) != 0:
            raise file_error(path, err or b"")
        return out or b""

    def write_file(self, path: str, data: bytes) -> None:
        argv = ["/bin/sh", "-c", WRITE_SCRIPT, "sh", self._cwd.absolute(path), f"runner-{new_nonce()}"]
        exec_id = self._exec_create(argv, stdin=True)
        err = self._call(lambda: _send_stdin(self._api.exec_start(exec_id, socket=True), data))
        if self._exit_code(exec_id) != 0:
            raise file_error(path, err)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._api.remove_container(self.container_id, force=True, v=True)
        except NotFound:
            pass
        except _TRANSPORT_ERRORS as exc:
            log.warning("docker: could not remove container %s: %s", self.name, _explain(exc))

    def __enter__(self) -> DockerBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stdio_command(
        self, argv: Sequence[str], env: Mapping[str, str], cwd: str | None
    ) -> tuple[list[str], dict[str, str]]:
        """``docker exec -i`` into this run's container (a stdio MCP server stays in the sandbox).
        Variables go by name (``-e NAME``): their values travel in the docker client's environment,
        never on a command line."""
        self._check_open()
        command = ["docker", "exec", "-i", "-w", self._cwd.resolve(cwd)]
        for name in env:
            command += ["-e", name]
        passed = {k: v for k, v in os.environ.items() if k.startswith("DOCKER_")}
        return [*command, self.container_id, *argv], {**passed, **env}

    # -- helpers --------------------------------------------------------------------------
    def _start(self, host_dir: Path) -> str:
        """Create and start the container through the low-level API (the high-level
        ``containers.create`` inspects the new container once more); its id."""
        spec = self.spec
        created = ""
        for attempt in (1, 2):
            try:
                created = self._create(host_dir)
                break
            except ImageNotFound as exc:  # removed since it was last seen: inspect (or pull) it again
                if attempt == 2:
                    raise BackendError(f"docker: cannot create a {spec.image!r} container ({_explain(exc)})") from exc
                DAEMON.forget_image(spec.image)
                DAEMON.ensure_image(self._client, spec.image, spec.pull)
        try:
            self._api.start(created)
        except _TRANSPORT_ERRORS as exc:
            self._api.remove_container(created, force=True)
            raise BackendError(f"docker: cannot start a {spec.image!r} container ({_explain(exc)})") from exc
        return created

    def _create(self, host_dir: Path) -> str:
        spec = self.spec
        labels = {
            LABEL_MANAGED: "1",
            LABEL_RUN: self.ctx.run_id or "",
            LABEL_JOB: self.ctx.job or "",
            LABEL_HOME: home_label(self.ctx.home),
        }
        user = spec.user or f"{os.getuid()}:{os.getgid()}"
        uid = user.partition(":")[0]
        host_config = self._api.create_host_config(
            network_mode=spec.network,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            pids_limit=PIDS_LIMIT,
            tmpfs={"/tmp": "rw,nosuid,nodev,mode=1777"},
            mounts=[
                Mount(WORKSPACE, str(host_dir), type="bind", read_only=False),
                *_read_only_mounts(host_dir, self.ctx.protected),
                *self._mounts,
            ],
            mem_limit=spec.memory,
            nano_cpus=spec.nano_cpus,
        )
        try:
            created = self._api.create_container(
                spec.image,
                entrypoint=["/bin/sh", "-c", IDLE],
                name=self.name,
                labels=labels,
                user=user,
                working_dir=WORKSPACE,
                environment={} if uid in ("0", "root") else {"HOME": "/tmp"},
                host_config=host_config,
                detach=True,
            )
        except ImageNotFound:
            raise
        except _TRANSPORT_ERRORS as exc:
            raise BackendError(f"docker: cannot create a {spec.image!r} container ({_explain(exc)})") from exc
        return str(created["Id"])

    def _call(self, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except NotFound as exc:
            raise BackendError(f"docker: container {self.name} no longer exists") from exc
        except _TRANSPORT_ERRORS as exc:
            raise BackendError(f"docker: container {self.name}: {_explain(exc)}") from exc

    def _exec_create(self, argv: list[str], *, env: Mapping[str, str] | None = None, stdin: bool = False) -> str:
        self._check_open()
        environment = dict(env) if env else None
        created = self._call(
            lambda: self._api.exec_create(self.container_id, argv, stdin=stdin, environment=environment)
        )
        return str(created["Id"])

    def _exec_quiet(self, script: str) -> None:
        exec_id = self._exec_create(["/bin/sh", "-c", script])
        self._call(lambda: self._api.exec_start(exec_id))

    def _exit_code(self, exec_id: str) -> int:
        for _ in range(100):
            info = self._call(lambda: self._api.exec_inspect(exec_id))
            if not info.get("Running") and info.get("ExitCode") is not None:
                return int(info["ExitCode"])
            time.sleep(0.02)
        raise BackendError(f"docker: exec in {self.name} did not report an exit code")

    def _check_open(self) -> None:
        if self._closed:
            raise BackendError(f"docker: backend for {self.name} is closed")


def _send_stdin(sock: Any, data: bytes) -> bytes:
    """Write ``data`` to an attached exec's stdin, close it, and return what it printed."""
    raw = getattr(sock, "_sock", sock)
    try:
        raw.sendall(data)
        raw.shutdown(socket.SHUT_WR)
        return b"".join(frame for _, frame in frames_iter(sock, tty=False))
    finally:
        sock.close()


def _close_stream(stream: Any) -> None:
    try:
        stream.close()
    except Exception:  # noqa: BLE001 - already closed or fully read
        pass


def _explain(exc: BaseException) -> str:
    if isinstance(exc, APIError) and exc.explanation:
        return str(exc.explanation)
    return str(exc) or type(exc).__name__


def home_label(home: Path) -> str:
    return str(Path(home).resolve())


def cleanup_stale(
    is_active: Callable[[str], bool], *, home: Path, client: docker.DockerClient | None = None
) -> list[str]:
    """Remove the containers of ``home``'s runs that are not active; returns their names.

    ``is_active(run_id)`` gets the container's ``runner.run_id`` label ("" for ad-hoc runs). A
    container another RUNNER_HOME made on the same dockerd is left alone: its runs are not in
    this home's store, so they would all look gone. One without the home label (made before
    the label existed) is judged by ``is_active`` alone.
    """
    client = client or DAEMON.client()
    mine = home_label(home)
    removed: list[str] = []
    try:
        for container in client.containers.list(all=True, filters={"label": f"{LABEL_MANAGED}=1"}):
            if container.labels.get(LABEL_HOME, mine) != mine or is_active(container.labels.get(LABEL_RUN, "")):
                continue
            try:
                container.remove(force=True, v=True)
            except NotFound:
                continue
            removed.append(container.name)
    except _TRANSPORT_ERRORS as exc:
        raise BackendError(f"docker: cleaning up stale containers failed ({_explain(exc)})") from exc
    return removed


def _bind(mount: HostMount) -> Mount:
    return Mount(mount.target, str(mount.source), type="bind", read_only=mount.read_only)


def from_spec(spec: DockerSpec, *, ctx: BackendContext) -> DockerBackend:
    return DockerBackend(spec, ctx)
