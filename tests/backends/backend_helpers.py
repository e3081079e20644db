"""Helpers shared by the backend tests (imported by conftest.py and the test modules)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from backends.base import BackendContext


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


def make_ctx(root: Path, **extra: Any) -> BackendContext:
    workdir = root / "work"
    workdir.mkdir(parents=True, exist_ok=True)
    return BackendContext(workdir=workdir, home=root / "home", **extra)


def spec_for(kind: str, request: pytest.FixtureRequest, workdir: Path) -> dict[str, Any]:
    if kind == "local":
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
