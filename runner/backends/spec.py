"""Backend specs: the one pydantic model per backend type and ``BackendSpec``, their union on ``type``.

jobs.yaml's ``backend:`` and the strings of ``runner backend run SPEC`` (``local``, ``docker:IMAGE``,
``ssh:[user@]host[:port]``) both become these models. Nothing here imports a backend implementation
or the Docker SDK; ``runner.backends.resolve`` does that, for the chosen type only. Each model
spells out ``extra="forbid", frozen=True`` itself: runner.config imports runner.backends, so
runner.backends cannot import runner.config's ``Strict``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from runner.backends.docker_spec import DockerSpec
from runner.backends.ssh_spec import SSHSpec
from runner.errors import UsageError


class LocalSpec(BaseModel):
    """``{type: local}``: subprocesses on this machine; no options."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["local"] = "local"

    def check(self, base: Path) -> None:
        """Nothing to check: the local backend has no options."""


BackendSpec = Annotated[LocalSpec | DockerSpec | SSHSpec, Field(discriminator="type")]
_MODELS: dict[str, type[BaseModel]] = {
    get_args(model.model_fields["type"].annotation)[0]: model for model in (LocalSpec, DockerSpec, SSHSpec)
}

_SSH_TARGET = re.compile(
    r"(?:(?P<user>[A-Za-z0-9_.+-]+)@)?(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(?::(?P<port>\d{1,5}))?"
)
_FORMS = "forms: local, docker:IMAGE, ssh:[user@]host[:port]"


@functools.cache
def _adapter() -> TypeAdapter[LocalSpec | DockerSpec | SSHSpec]:
    """The union's validator, built on first use (jobs.yaml validates through JobSpec instead)."""
    return TypeAdapter(BackendSpec)


def known_types() -> list[str]:
    return sorted(_MODELS)


def parse_spec(spec: object) -> LocalSpec | DockerSpec | SSHSpec:
    """The model for a string spec, a mapping (``type`` defaults to local) or a model (returned as is).

    Raises UsageError (and nothing else) for anything that is not a valid spec.
    """
    if isinstance(spec, LocalSpec | DockerSpec | SSHSpec):
        return spec
    if isinstance(spec, str):
        spec = _string_fields(spec)
    if not isinstance(spec, Mapping):
        raise UsageError(f"backend spec must be a string or a mapping, got {type(spec).__name__}")
    fields = {"type": "local", **spec}
    kind = fields["type"]
    if not isinstance(kind, str) or kind not in _MODELS:
        raise UsageError(f"unknown backend type {kind!r}; known types: {', '.join(known_types())}")
    try:
        return _adapter().validate_python(fields)
    except ValidationError as exc:
        raise UsageError(describe(kind, exc)) from None


def describe(kind: str, exc: ValidationError) -> str:
    """One line for a spec's validation errors: ``docker backend: memory: must look like ...``."""
    problems, unknown = [], []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        if loc and loc[0] == kind:  # the union's tag
            loc = loc[1:]
        if err["type"] == "extra_forbidden":
            unknown.append(".".join(loc))
            continue
        problems.append(f"{'.'.join(loc) or 'spec'}: {err['msg'].removeprefix('Value error, ')}")
    if unknown:
        known = sorted(set(_MODELS[kind].model_fields) - {"type"})
        options = ", ".join(sorted(unknown))
        problems.append(
            f"unknown option(s) {options}; known: {', '.join(known)}" if known else f"takes no options (got {options})"
        )
    return f"{kind} backend: " + "; ".join(problems)


def _string_fields(spec: str) -> dict[str, Any]:
    text = spec.strip()
    kind, sep, rest = text.partition(":")
    if kind == "local" and not sep:
        return {"type": "local"}
    if kind == "docker" and rest and not any(ch.isspace() for ch in rest):
        return {"type": "docker", "image": rest}
    if kind == "ssh" and rest:
        return _ssh_target(spec, rest)
    if kind in _MODELS:
        raise UsageError(f"invalid backend spec {spec!r} ({_FORMS})")
    raise UsageError(f"unknown backend spec {spec!r}; known types: {', '.join(known_types())} ({_FORMS})")


def _ssh_target(spec: str, rest: str) -> dict[str, Any]:
    match = _SSH_TARGET.fullmatch(rest)
    if not match or match.group("host").startswith("-"):
        raise UsageError(f"invalid ssh backend spec {spec!r}; expected ssh:[user@]host[:port]")
    out: dict[str, Any] = {"type": "ssh", "host": match.group("host").strip("[]")}
    if match.group("user"):
        out["user"] = match.group("user")
    if match.group("port"):
        out["port"] = int(match.group("port"))
    return out
