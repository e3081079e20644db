"""The ``ssh`` backend spec: the one model of an ssh backend, for jobs.yaml and ``ssh:[user@]host[:port]``,
and the ssh client command line it gives."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, field_validator

STRICT_VALUES = ("yes", "no", "accept-new")
_HOST = re.compile(r"[A-Za-z0-9_.%:\[\]-]+")
_USER = re.compile(r"[A-Za-z0-9_.@+-]+")
_OPTION = re.compile(r"[A-Za-z][A-Za-z0-9]*=[^\n\r]*")
#: options runner relies on; ssh_options may not change them
_RESERVED = frozenset({"controlmaster", "controlpath", "controlpersist", "batchmode"})


def _positive_int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).isdigit() or int(value) < 1:
        raise ValueError(f"must be a positive whole number, got {value!r}")
    return int(value)


def _port(value: object) -> int | None:
    if value is None:
        return None
    port = _positive_int(value)
    if port > 65535:
        raise ValueError(f"must be 1-65535, got {value!r}")
    return port


def _path(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"must be a file path, got {value!r}")
    return str(Path(value).expanduser())


def _strict(value: object) -> object:
    if isinstance(value, bool):  # YAML reads a bare yes/no as a boolean
        return "yes" if value else "no"
    return value


def _options(value: object) -> object:
    if value is None:
        return ()
    items = [f"{k}={v}" for k, v in value.items()] if isinstance(value, Mapping) else value
    if not isinstance(items, list | tuple) or not all(isinstance(i, str) and _OPTION.fullmatch(i) for i in items):
        raise ValueError("must be a list of Key=Value strings or a mapping")
    for item in items:
        name = item.split("=", 1)[0]
        if name.lower() in _RESERVED:
            raise ValueError(f"may not set {name} (runner manages it)")
    return tuple(items)


class SSHSpec(BaseModel):
    """``{type: ssh, host, user, port, key, workdir, connect_timeout: 10,
    strict_host_key_checking: accept-new, known_hosts_file, ssh_options}``.

    ``port`` unset passes no ``-p``, so a ``Port`` in ~/.ssh/config applies; ``key`` and
    ``known_hosts_file`` have ``~`` expanded.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["ssh"] = "ssh"
    host: str
    user: str | None = None
    port: Annotated[int | None, BeforeValidator(_port)] = None
    key: Annotated[str | None, BeforeValidator(_path)] = None
    workdir: str | None = None
    connect_timeout: Annotated[int, BeforeValidator(_positive_int)] = 10
    strict_host_key_checking: Annotated[Literal["yes", "no", "accept-new"], BeforeValidator(_strict)] = "accept-new"
    known_hosts_file: Annotated[str | None, BeforeValidator(_path)] = None
    ssh_options: Annotated[tuple[str, ...], BeforeValidator(_options)] = ()

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        if not _HOST.fullmatch(value) or value.startswith("-"):
            raise ValueError(f"must be a host name or address, got {value!r}")
        return value

    @field_validator("user")
    @classmethod
    def _user(cls, value: str | None) -> str | None:
        if value is not None and (not _USER.fullmatch(value) or value.startswith("-")):
            raise ValueError(f"invalid user {value!r}")
        return value

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or "\n" in value):
            raise ValueError(f"must be a remote path, got {value!r}")
        return value

    def check(self, base: Path) -> None:
        """Nothing about an ssh spec depends on the local workdir."""

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
