"""Terminal backends: where a job's commands run.

``resolve(spec, ...)`` turns a string spec (``local``, ``docker:IMAGE``, ``ssh:user@host:port``)
or a jobs.yaml mapping into a backend object. Implementations are imported lazily so a local
run never imports the Docker SDK.
"""

from __future__ import annotations

import importlib
from typing import Any

from backends.base import Backend, ExecResult
from runner.errors import BackendError, UsageError

# type name -> "module:factory"; a factory takes (spec: dict, *, ctx: BackendContext)
_KINDS: dict[str, str] = {
    "local": "backends.local:from_spec",
}


def known_types() -> list[str]:
    return sorted(_KINDS)


def parse_spec(spec: str | dict[str, Any]) -> dict[str, Any]:
    """Normalise a string or mapping spec into a mapping with a ``type`` key."""
    if isinstance(spec, dict):
        out = dict(spec)
        out.setdefault("type", "local")
        return out
    text = spec.strip()
    kind, _, rest = text.partition(":")
    if kind == "local" and not rest:
        return {"type": "local"}
    if kind == "docker" and rest:
        return {"type": "docker", "image": rest}
    if kind == "ssh" and rest:
        userhost, _, port = rest.rpartition(":") if rest.count(":") == 1 else (rest, "", "")
        if not userhost:
            userhost, port = rest, ""
        user, _, host = userhost.rpartition("@")
        ssh: dict[str, Any] = {"type": "ssh", "host": host}
        if user:
            ssh["user"] = user
        if port:
            if not port.isdigit():
                raise UsageError(f"backend spec {spec!r}: port must be a number")
            ssh["port"] = int(port)
        return ssh
    raise UsageError(
        f"unknown backend spec {spec!r}; known types: {', '.join(known_types())} "
        "(forms: local, docker:IMAGE, ssh:user@host:port)"
    )


def resolve(spec: str | dict[str, Any], **kwargs: Any) -> Backend:
    mapping = parse_spec(spec)
    kind = mapping["type"]
    target = _KINDS.get(kind)
    if target is None:
        raise UsageError(f"unknown backend type {kind!r}; known types: {', '.join(known_types())}")
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:  # pragma: no cover - depends on install
        raise BackendError(f"backend {kind!r} is not available: {exc}") from exc
    factory = getattr(module, attr)
    backend: Backend = factory(mapping, **kwargs)
    return backend


__all__ = ["Backend", "ExecResult", "resolve", "parse_spec", "known_types"]
