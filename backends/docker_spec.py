"""The ``docker`` backend spec: validation of a jobs.yaml mapping into a DockerSpec.

Kept apart from backends/docker.py so reading a spec never needs the Docker SDK or a daemon.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docker.types import Mount

from runner.errors import UsageError

WORKSPACE = "/workspace"
SPEC_KEYS = frozenset({"type", "image", "network", "memory", "cpus", "mounts", "pull", "user"})
PULL_POLICIES = ("missing", "never", "always")
_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
_KNOWN_SOCKETS = ("/var/run/docker.sock", "/run/docker.sock")


@dataclass(frozen=True)
class DockerSpec:
    image: str
    network: str = "none"
    memory: int | None = None  # bytes
    nano_cpus: int | None = None
    mounts: tuple[Mount, ...] = ()
    pull: str = "missing"
    user: str = ""


def parse_docker_spec(spec: Mapping[str, Any], *, base: Path) -> DockerSpec:
    """Validate a docker spec; relative mount sources are relative to ``base`` (the workdir)."""
    unknown = set(spec) - SPEC_KEYS
    if unknown:
        raise UsageError(
            f"docker backend: unknown option(s) {', '.join(sorted(unknown))}; "
            f"known: {', '.join(sorted(SPEC_KEYS - {'type'}))}"
        )
    image = spec.get("image")
    if not isinstance(image, str) or not image.strip() or any(ch.isspace() for ch in image):
        raise UsageError(f"docker backend: `image` must be an image name, got {image!r}")
    pull = str(spec.get("pull", "missing"))
    if pull not in PULL_POLICIES:
        raise UsageError(f"docker backend: `pull` must be one of {', '.join(PULL_POLICIES)}, got {pull!r}")
    network = str(spec.get("network") or "none")
    user = str(spec.get("user") or f"{os.getuid()}:{os.getgid()}")
    mounts = spec.get("mounts") or []
    if not isinstance(mounts, list):
        raise UsageError("docker backend: `mounts` must be a list")
    return DockerSpec(
        image=image,
        network=network,
        memory=parse_memory(spec.get("memory")),
        nano_cpus=parse_cpus(spec.get("cpus")),
        mounts=tuple(parse_mount(item, base) for item in mounts),
        pull=pull,
        user=user,
    )


def parse_memory(value: object) -> int | None:
    if value is None:
        return None
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([bkmg]?)b?", str(value).strip().lower())
    if not match or float(match.group(1)) <= 0:
        raise UsageError(f"docker backend: `memory` must look like 512m or 1g, got {value!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def parse_cpus(value: object) -> int | None:
    if value is None:
        return None
    try:
        cpus = float(str(value))
    except ValueError:
        cpus = 0.0
    if not cpus > 0:
        raise UsageError(f"docker backend: `cpus` must be a positive number, got {value!r}")
    return int(cpus * 1e9)


def parse_mount(item: object, base: Path) -> Mount:
    """``"host:container[:ro|rw]"`` or ``{source, target, rw}``; read-only unless rw."""
    if isinstance(item, str):
        parts = item.split(":")
        if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
            raise UsageError(f"docker mount {item!r}: expected HOST:CONTAINER[:ro|rw]")
        source, target, writable = parts[0], parts[1], parts[2:] == ["rw"]
    elif isinstance(item, Mapping):
        extra = set(item) - {"source", "target", "rw"}
        src, dst = item.get("source"), item.get("target")
        if extra or not isinstance(src, str) or not isinstance(dst, str):
            raise UsageError(f"docker mount {dict(item)!r}: expected keys source, target and optional rw")
        source, target, writable = src, dst, item.get("rw") is True
    else:
        raise UsageError(f"docker mount {item!r}: expected a string or a mapping")
    if not source or not target.startswith("/"):
        raise UsageError(f"docker mount {item!r}: need a host path and an absolute container path")
    if posixpath.normpath(target) == WORKSPACE:
        raise UsageError(f"docker mount {item!r}: {WORKSPACE} is the job's workdir already")
    host = (base / Path(source).expanduser()).resolve()
    check_not_docker_socket(host, what=f"mount {source!r}")
    if not host.exists():
        raise UsageError(f"docker mount {item!r}: {host} does not exist")
    return Mount(target, str(host), type="bind", read_only=not writable)


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
