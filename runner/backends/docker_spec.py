"""The ``docker`` backend spec: the one model of a docker backend, for jobs.yaml and ``docker:IMAGE``.

Kept apart from runner/backends/docker.py so reading a spec never imports the Docker SDK or needs a daemon.
What depends on the workdir (mount sources relative to it, the Docker-socket refusal) is checked
by ``DockerSpec.host_mounts(base)`` / ``check(base)``, not while the fields are read.
"""

from __future__ import annotations

import math
import os
import posixpath
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, field_validator

from runner.errors import UsageError

WORKSPACE = "/workspace"
DEFAULT_MEMORY = 1024**3  # 1 GiB, as ``memory: 1g``
DEFAULT_CPUS = 1.0
_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
_KNOWN_SOCKETS = ("/var/run/docker.sock", "/run/docker.sock")


def parse_memory(value: object) -> int | None:
    """``512m``, ``1g``, ``1.5g`` or a number of bytes -> bytes; None means no limit."""
    if value is None:
        return None
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([bkmg]?)b?", str(value).strip().lower())
    if isinstance(value, bool) or not match or float(match.group(1)) <= 0:
        raise ValueError(f"must look like 512m or 1g, got {value!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def parse_cpus(value: object) -> float | None:
    """A positive number of CPUs (``1``, ``0.5``, ``"1.5"``); None means no limit."""
    if value is None:
        return None
    try:
        cpus = float(str(value)) if not isinstance(value, bool) else 0.0
    except ValueError:
        cpus = 0.0
    if not (cpus > 0 and math.isfinite(cpus)):
        raise ValueError(f"must be a positive number, got {value!r}")
    return cpus


def _mount_fields(item: object) -> object:
    """``"host:container[:ro|rw]"`` -> ``{source, target, rw}``; a mapping is left to the model."""
    if not isinstance(item, str):
        return item
    parts = item.split(":")
    if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
        raise ValueError(f"mount {item!r}: expected HOST:CONTAINER[:ro|rw]")
    return {"source": parts[0], "target": parts[1], "rw": parts[2:] == ["rw"]}


class MountSpec(BaseModel):
    """One extra bind mount: a host path (relative to the workdir) at ``target``; read-only unless ``rw``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str
    target: str
    rw: bool = False

    @field_validator("source")
    @classmethod
    def _source(cls, value: str) -> str:
        if not value:
            raise ValueError("need a host path")
        return value

    @field_validator("target")
    @classmethod
    def _target(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(f"need an absolute container path, got {value!r}")
        if posixpath.normpath(value) == WORKSPACE:
            raise ValueError(f"{WORKSPACE} is the job's workdir already")
        return value

    def __str__(self) -> str:
        return f"{self.source}:{self.target}" + (":rw" if self.rw else "")


@dataclass(frozen=True)
class HostMount:
    """A mount checked against the workdir: an absolute host path that exists and is not the Docker socket."""

    source: Path
    target: str
    read_only: bool


class DockerSpec(BaseModel):
    """``{type: docker, image, network: none, memory: 1g, cpus: 1, mounts, pull: missing, user}``.

    ``memory`` is held in bytes and ``cpus`` as a number; ``null`` for either means no limit.
    ``user`` unset means the invoking uid:gid (filled in by the backend).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["docker"] = "docker"
    image: str
    network: str = "none"
    memory: Annotated[int | None, BeforeValidator(parse_memory)] = DEFAULT_MEMORY
    cpus: Annotated[float | None, BeforeValidator(parse_cpus)] = DEFAULT_CPUS
    mounts: tuple[Annotated[MountSpec, BeforeValidator(_mount_fields)], ...] = ()
    pull: Literal["missing", "never", "always"] = "missing"
    user: str | None = None

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        if not value.strip() or any(ch.isspace() for ch in value):
            raise ValueError(f"must be an image name, got {value!r}")
        return value

    @property
    def nano_cpus(self) -> int | None:
        return None if self.cpus is None else int(self.cpus * 1e9)

    def host_mounts(self, base: Path) -> tuple[HostMount, ...]:
        """The mounts with sources resolved against ``base`` (the workdir); UsageError when one is missing
        or would expose the Docker socket."""
        out = []
        for mount in self.mounts:
            host = (base / Path(mount.source).expanduser()).resolve()
            check_not_docker_socket(host, what=f"mount {str(mount)!r}")
            if not host.exists():
                raise UsageError(f"docker backend: mount {str(mount)!r}: {host} does not exist")
            out.append(HostMount(host, mount.target, read_only=not mount.rw))
        return tuple(out)

    def check(self, base: Path) -> None:
        """What only the workdir can tell (see ``host_mounts``); raises UsageError."""
        self.host_mounts(base)


def docker_sockets() -> list[Path]:
    """Paths of the Docker daemon socket(s) on this machine."""
    found = [Path(p) for p in _KNOWN_SOCKETS]
    host = os.environ.get("DOCKER_HOST", "")
    if host.startswith("unix://"):
        found.append(Path(host[len("unix://") :]))
    return [p.resolve() for p in found if p.exists()]


def check_not_docker_socket(host: Path, *, what: str) -> None:
    """Refuse a bind mount that is, or contains, the Docker socket."""
    exposed = host.name.endswith("docker.sock") and (not host.exists() or stat.S_ISSOCK(host.stat().st_mode))
    for sock in docker_sockets():
        if sock == host or host in sock.parents:
            exposed = True
    if exposed:
        raise UsageError(f"docker backend: {what} would expose the Docker socket ({host}); refused")
