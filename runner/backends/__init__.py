"""Terminal backends: where a job's commands run.

``resolve(spec, ...)`` turns a spec (a model of runner/backends/spec.py, a jobs.yaml mapping or a string:
``local``, ``docker:IMAGE``, ``ssh:user@host:port``) into a backend object. The implementation is
imported only for the chosen type, so a local run never imports the Docker SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from runner.errors import BackendError

if TYPE_CHECKING:
    from runner.backends.base import Backend, ExecResult
    from runner.backends.spec import BackendSpec, known_types, parse_spec

# type name -> "module:factory"; a factory takes (spec: the type's model, *, ctx: BackendContext)
_FACTORIES: dict[str, str] = {
    "local": "runner.backends.local:from_spec",
    "docker": "runner.backends.docker:from_spec",
    "ssh": "runner.backends.ssh:from_spec",
}


def resolve(spec: object, **kwargs: Any) -> Backend:
    """A ready backend for ``spec``; pass ``ctx=BackendContext(...)``. Close it when done."""
    from runner.backends.spec import parse_spec

    model = parse_spec(spec)  # UsageError unless it is a valid spec (a model is returned as is)
    module_name, _, attr = _FACTORIES[model.type].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:  # pragma: no cover - depends on install
        raise BackendError(f"backend {model.type!r} is not available: {exc}") from exc
    factory = getattr(module, attr)
    backend: Backend = factory(model, **kwargs)
    return backend


def __getattr__(name: str) -> Any:
    """``runner.backends.Backend`` and ``runner.backends.ExecResult`` without importing
    runner.backends.base for a spec; ``BackendSpec``, ``known_types`` and ``parse_spec`` without
    importing pydantic for ``import runner.backends``."""
    if name in ("Backend", "ExecResult"):
        from runner.backends import base

        return getattr(base, name)
    if name in ("BackendSpec", "known_types", "parse_spec"):
        from runner.backends import spec

        return getattr(spec, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Backend", "BackendSpec", "ExecResult", "resolve", "parse_spec", "known_types"]
