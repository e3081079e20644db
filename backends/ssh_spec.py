"""The ``ssh`` backend spec: validation of a jobs.yaml mapping and the ssh client options."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.errors import UsageError

SPEC_KEYS = frozenset(
    {
        "type", "host", "user", "port", "key", "workdir", "connect_timeout",
        "strict_host_key_checking", "known_hosts_file", "ssh_options",
    }
)  # fmt: skip
STRICT_VALUES = ("yes", "no", "accept-new")
_HOST = re.compile(r"[A-Za-z0-9_.%:\[\]-]+")
_USER = re.compile(r"[A-Za-z0-9_.@+-]+")
_OPTION = re.compile(r"[A-Za-z][A-Za-z0-9]*=[^\n\r]*")
#: options runner relies on; ssh_options may not change them
_RESERVED = frozenset({"controlmaster", "controlpath", "controlpersist", "batchmode"})


@dataclass(frozen=True)
class SSHSpec:
    host: str
    user: str | None = None
    port: int | None = None
    key: str | None = None
    workdir: str | None = None
    connect_timeout: int = 10
    strict_host_key_checking: str = "accept-new"
    known_hosts_file: str | None = None
    ssh_options: tuple[str, ...] = ()

    @property
    def destination(self) -> str:
        where = f"{self.user}@{self.host}" if self.user else self.host
        return f"{where}:{self.port}" if self.port else where

    def ssh_argv(self, control_path: Path, persist: str) -> list[str]:
        """The ssh client command line up to (not including) the host."""
        options = [
            "ControlMaster=auto",
            f"ControlPath={control_path}",
            f"ControlPersist={persist}",
            "BatchMode=yes",
            f"ConnectTimeout={self.connect_timeout}",
            f"StrictHostKeyChecking={self.strict_host_key_checking}",
            "ServerAliveInterval=15",
            "LogLevel=ERROR",
        ]
        if self.known_hosts_file:
            options.append(f"UserKnownHostsFile={self.known_hosts_file}")
        if self.key:
            options.append("IdentitiesOnly=yes")
        argv = ["ssh", "-T"]
        for option in (*options, *self.ssh_options):
            argv += ["-o", option]
        if self.port:
            argv += ["-p", str(self.port)]
        if self.user:
            argv += ["-l", self.user]
        if self.key:
            argv += ["-i", self.key]
        return argv


def parse_ssh_spec(spec: Mapping[str, Any]) -> SSHSpec:
    unknown = set(spec) - SPEC_KEYS
    if unknown:
        raise UsageError(
            f"ssh backend: unknown option(s) {', '.join(sorted(unknown))}; "
            f"known: {', '.join(sorted(SPEC_KEYS - {'type'}))}"
        )
    host = spec.get("host")
    if not isinstance(host, str) or not _HOST.fullmatch(host) or host.startswith("-"):
        raise UsageError(f"ssh backend: `host` must be a host name or address, got {host!r}")
    user = spec.get("user")
    if user is not None and (not isinstance(user, str) or not _USER.fullmatch(user) or user.startswith("-")):
        raise UsageError(f"ssh backend: invalid `user` {user!r}")
    return SSHSpec(
        host=host,
        user=user,
        port=_port(spec.get("port")),
        key=_path(spec.get("key"), "key"),
        workdir=_workdir(spec.get("workdir")),
        connect_timeout=_positive_int(spec.get("connect_timeout", 10), "connect_timeout"),
        strict_host_key_checking=_strict(spec.get("strict_host_key_checking", "accept-new")),
        known_hosts_file=_path(spec.get("known_hosts_file"), "known_hosts_file"),
        ssh_options=_options(spec.get("ssh_options")),
    )


def _port(value: object) -> int | None:
    if value is None:
        return None
    port = _positive_int(value, "port")
    if port > 65535:
        raise UsageError(f"ssh backend: `port` must be 1-65535, got {value!r}")
    return port


def _positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).isdigit():
        raise UsageError(f"ssh backend: `{name}` must be a positive whole number, got {value!r}")
    if int(value) < 1:
        raise UsageError(f"ssh backend: `{name}` must be a positive whole number, got {value!r}")
    return int(value)


def _path(value: object, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"ssh backend: `{name}` must be a file path, got {value!r}")
    return str(Path(value).expanduser())


def _workdir(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or "\n" in value:
        raise UsageError(f"ssh backend: `workdir` must be a remote path, got {value!r}")
    return value


def _strict(value: object) -> str:
    if isinstance(value, bool):  # YAML reads a bare yes/no as a boolean
        value = "yes" if value else "no"
    if value not in STRICT_VALUES:
        raise UsageError(f"ssh backend: `strict_host_key_checking` must be {' or '.join(STRICT_VALUES)}, got {value!r}")
    return str(value)


def _options(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    items = [f"{k}={v}" for k, v in value.items()] if isinstance(value, Mapping) else value
    if not isinstance(items, list) or not all(isinstance(i, str) and _OPTION.fullmatch(i) for i in items):
        raise UsageError("ssh backend: `ssh_options` must be a list of Key=Value strings or a mapping")
    for item in items:
        name = item.split("=", 1)[0]
        if name.lower() in _RESERVED:
            raise UsageError(f"ssh backend: `ssh_options` may not set {name} (runner manages it)")
    return tuple(items)
