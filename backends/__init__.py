"""Terminal backends: where a job's commands run.

``resolve(spec, ...)`` turns a string spec (``local``, ``docker:IMAGE``, ``ssh:user@host:port``)
or a jobs.yaml mapping into a backend object. Implementations are imported lazily so a local
run never imports the Docker SDK.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from typing import Any

from backends.base import Backend, ExecResult
from runner.errors import BackendError, UsageError

# type name -> "module:factory"; a factory takes (spec: dict, *, ctx: BackendContext)
_KINDS: dict[str, str] = {
    "local": "backends.local:from_spec",
    "docker": "backends.docker:from_spec",
    "ssh": "backends.ssh:from_spec",
}


def known_types() -> list[str]:
    return sorted(_KINDS)


_SSH_TARGET = re.compile(
    r"(?:(?P<user>[A-Za-z0-9_.+-]+)@)?(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(?::(?P<port>\d{1,5}))?"
)
_FORMS = "forms: local, docker:IMAGE, ssh:[user@]host[:port]"


def parse_spec(spec: str | Mapping[str, Any]) -> dict[str, Any]:
    """Normalise a string or mapping spec into a mapping with a ``type`` key.

    Raises UsageError (and nothing else) for anything that is not a valid spec.
    """
    if isinstance(spec, Mapping):
        out = dict(spec)
        kind = out.setdefault("type", "local")
        if not isinstance(kind, str) or kind not in _KINDS:
            raise UsageError(f"unknown backend type {kind!r}; known types: {', '.join(known_types())}")
        return out
    if not isinstance(spec, str):
        raise UsageError(f"backend spec must be a string or a mapping, got {type(spec).__name__}")
    text = spec.strip()
    kind, sep, rest = text.partition(":")
    if kind == "local" and not sep:
        return {"type": "local"}
    if kind == "docker" and rest and not any(ch.isspace() for ch in rest):
        return {"type": "docker", "image": rest}
    if kind == "ssh" and rest:
        return _parse_ssh_target(spec, rest)
    if kind in _KINDS:
        raise UsageError(f"invalid backend spec {spec!r} ({_FORMS})")
    raise UsageError(f"unknown backend spec {spec!r}; known types: {', '.join(known_types())} ({_FORMS})")


def _parse_ssh_target(spec: str, rest: str) -> dict[str, Any]:
    match = _SSH_TARGET.fullmatch(rest)
    if not match or match.group("host").startswith("-"):
        raise UsageError(f"invalid ssh backend spec {spec!r}; expected ssh:[user@]host[:port]")
    out: dict[str, Any] = {"type": "ssh", "host": match.group("host").strip("[]")}
    if match.group("user"):
        out["user"] = match.group("user")
    if match.group("port"):
        port = int(match.group("port"))
        if not 0 < port < 65536:
            raise UsageError(f"backend spec {spec!r}: port must be 1-65535")
        out["port"] = port
    return out


def resolve(spec: str | Mapping[str, Any], **kwargs: Any) -> Backend:
    """A ready backend for ``spec``; pass ``ctx=BackendContext(...)``. Close it when done."""
    mapping = parse_spec(spec)
    module_name, _, attr = _KINDS[mapping["type"]].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:  # pragma: no cover - depends on install
        raise BackendError(f"backend {mapping['type']!r} is not available: {exc}") from exc
    factory = getattr(module, attr)
    backend: Backend = factory(mapping, **kwargs)
    return backend


__all__ = ["Backend", "ExecResult", "resolve", "parse_spec", "known_types"]
