"""The plain form of the validated config models: what ``run-job`` runs on without pydantic.

pydantic validates jobs.yaml and config.yaml (``runner.config.jobs``, ``runner.config.machine``,
``backends.spec``). ``freeze`` turns validated models into a JSON-ready tree: every field of
every model, nested models tagged with their class. ``thaw`` turns such a tree into ``Plain``
objects that read like the models: the same field names and values, read-only, ``==``,
``model_dump`` and ``model_copy(update=...)``. Importing this module imports no pydantic.

Methods: the few a run calls on every start live in the mixins below, which the pydantic models
inherit too (one body for both forms). Any other method or property of a model is taken from the
model class on first use (``Plain.__getattr__``): that imports the model's module, and with it
pydantic, only for the runs that need it (a Docker or SSH backend, MCP servers, web search).

Only the models of ``MODULES`` can be named by a tag; a tree holding anything but JSON values
(str, int, float, bool, None, lists, dicts with text keys) cannot be frozen (``Unfreezable``).
"""

from __future__ import annotations

import functools
import importlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

if TYPE_CHECKING:
    from runner.safety.ssrf import WebPolicy

MODULES = frozenset(
    {
        "runner.config.jobs",
        "runner.config.machine",
        "runner.config.mcp",
        "runner.config.model_options",
        "backends.spec",
        "backends.docker_spec",
        "backends.ssh_spec",
    }
)
_SCALARS = (str, int, float, bool)
T = TypeVar("T")
P = TypeVar("P", bound="Plain")


class Unfreezable(ValueError):
    """A value the plain form cannot hold as it is (a tuple, a date, a path, an enum...)."""


# -- the methods a run calls on every start, shared by both forms ---------------------------------
# (the fields the methods read are declared for the type checker only: pydantic would take
# annotations of a base class into its field order)
class WebSpecMethods:
    if TYPE_CHECKING:
        allow_private: bool
        allow_domains: list[str]
        deny_domains: list[str]

    def policy(self) -> WebPolicy:
        from runner.safety.ssrf import WebPolicy

        return WebPolicy(self.allow_private, tuple(self.allow_domains), tuple(self.deny_domains))


class ModelOptionsMethods:
    if TYPE_CHECKING:
        extra_body: dict[str, Any]
        extra_headers: dict[str, str]

    def over(self: T, base: T) -> T:
        """These options on top of ``base`` (a provider's): set keys win, dicts merge."""
        mine, theirs = cast(Any, self), cast(Any, base)
        update = mine.model_dump(exclude={"extra_body", "extra_headers"}, exclude_none=True)
        update["extra_body"] = {**theirs.extra_body, **mine.extra_body}
        update["extra_headers"] = {**theirs.extra_headers, **mine.extra_headers}
        return cast(T, theirs.model_copy(update=update))


class ConfigMethods:
    if TYPE_CHECKING:
        providers: Mapping[str, Any]

    def split_model_ref(self, ref: str) -> tuple[str, str]:
        """(provider name, model or "") of a jobs.yaml ``model:`` entry.

        ``NAME`` is a provider; ``NAME/model`` is a provider and its model only when NAME names a
        configured provider; otherwise a text with a slash is a model id for the ``default``
        provider (``meta-llama/Llama-3.1-8B-Instruct``)."""
        if ref in self.providers:
            return ref, ""
        name, slash, model = ref.partition("/")
        if slash and name in self.providers:
            return name, model
        if slash and name and model:
            return "default", ref
        return ref, ""


class LocalSpecMethods:
    """The plain local spec's ``check`` (``backends.spec.LocalSpec.check``, which backends cannot
    take from here: runner.config imports backends, not the other way round)."""

    def check(self, base: Path) -> None:
        """Nothing to check: the local backend has no options."""


MIXINS: dict[str, type] = {
    "runner.config.jobs:WebSpec": WebSpecMethods,
    "runner.config.model_options:ModelOptions": ModelOptionsMethods,
    "runner.config.machine:Config": ConfigMethods,
    "backends.spec:LocalSpec": LocalSpecMethods,
}


# -- the plain objects ------------------------------------------------------------------------------
class Plain:
    """A read-only object holding one model's fields (see the module docstring)."""

    _tag = ""

    def __init__(self, fields: Mapping[str, Any]):
        for name, value in fields.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise TypeError(f"{type(self).__name__}.{name} is read-only")

    def __delattr__(self, name: str) -> None:
        raise TypeError(f"{type(self).__name__}.{name} is read-only")

    def __getattr__(self, name: str) -> Any:
        """A method or property of the model class, taken on first use (imports the model)."""
        if name.startswith("_"):
            raise AttributeError(name)
        found = _model_attribute(self._tag, name)
        if found is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        if isinstance(found, property) and found.fget is not None:
            return found.fget(self)
        if callable(found):
            return found.__get__(self, type(self))
        return found

    def __str__(self) -> str:
        own = _model_attribute(self._tag, "__str__")
        return own(self) if own is not None else repr(self)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({inner})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Plain):
            return self._tag == other._tag and vars(self) == vars(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self._tag, json.dumps(self.model_dump(), sort_keys=True)))

    def model_dump(
        self, *, mode: str = "python", exclude: set[str] | None = None, exclude_none: bool = False
    ) -> dict[str, Any]:
        """The fields as plain data (nested models as dicts), like pydantic's."""
        skip = exclude or set()
        return {k: _dump(v, mode) for k, v in vars(self).items() if k not in skip and not (exclude_none and v is None)}

    def model_copy(self: P, *, update: Mapping[str, Any] | None = None) -> P:
        return type(self)({**vars(self), **(update or {})})


def _dump(value: Any, mode: str) -> Any:
    if isinstance(value, Plain):
        return value.model_dump(mode=mode)
    if isinstance(value, dict):
        return {k: _dump(v, mode) for k, v in value.items()}
    if isinstance(value, list):
        return [_dump(v, mode) for v in value]
    if isinstance(value, tuple):  # pydantic dumps a tuple as a tuple, and as a list in JSON mode
        items = [_dump(v, mode) for v in value]
        return items if mode == "json" else tuple(items)
    return value


@functools.cache
def plain_class(tag: str) -> type[Plain]:
    """The plain class of the model ``MODULE:CLASS`` (only models of ``MODULES``)."""
    module, _, name = tag.partition(":")
    if module not in MODULES or not name.isidentifier():
        raise ValueError(f"not a config model: {tag!r}")
    mixin = MIXINS.get(tag)
    bases: tuple[type, ...] = (Plain, mixin) if mixin is not None else (Plain,)
    return type(name, bases, {"_tag": tag, "__module__": __name__})


@functools.cache
def _model_attribute(tag: str, name: str) -> Any:
    """``name`` as the model class itself (or a base of it that is not pydantic's) defines it."""
    module, _, cls_name = tag.partition(":")
    model = getattr(importlib.import_module(module), cls_name)
    for klass in model.__mro__:
        if klass.__module__.split(".")[0] == "pydantic" or klass is object:
            return None
        if name in vars(klass):
            return vars(klass)[name]
    return None


# -- the tree ---------------------------------------------------------------------------------------
def freeze(value: Any) -> Any:
    """A validated model (or a value inside one) as a JSON-ready tree: a model is
    ``{"m": "MODULE:CLASS", "f": {field: tree}}``, a dict ``{"d": {key: tree}}``, a tuple
    ``{"t": [tree, ...]}``, a list a list."""
    cls = type(value)
    if hasattr(cls, "__pydantic_fields__"):
        tag = f"{cls.__module__}:{cls.__qualname__}"
        if cls.__module__ not in MODULES:
            raise Unfreezable(f"{tag} is not a config model")
        return {"m": tag, "f": {name: freeze(getattr(value, name)) for name in cls.__pydantic_fields__}}
    if cls is dict:
        if not all(type(k) is str for k in value):
            raise Unfreezable("a mapping with keys that are not text")
        return {"d": {k: freeze(v) for k, v in value.items()}}
    if cls is list:
        return [freeze(v) for v in value]
    if cls is tuple:
        return {"t": [freeze(v) for v in value]}
    if value is None or cls in _SCALARS:
        return value
    raise Unfreezable(f"a value of type {cls.__name__}")


def thaw(tree: Any) -> Any:
    """The plain objects of a tree ``freeze`` made; ValueError for anything else."""
    if isinstance(tree, dict):
        if set(tree) == {"m", "f"} and isinstance(tree["f"], dict):
            if not all(k.isidentifier() and not k.startswith("_") for k in tree["f"]):
                raise ValueError("a field name that is no field name")
            return plain_class(str(tree["m"]))({k: thaw(v) for k, v in tree["f"].items()})
        if set(tree) == {"d"} and isinstance(tree["d"], dict):
            return {k: thaw(v) for k, v in tree["d"].items()}
        if set(tree) == {"t"} and isinstance(tree["t"], list):
            return tuple(thaw(v) for v in tree["t"])
        raise ValueError("not a frozen tree")
    if isinstance(tree, list):
        return [thaw(v) for v in tree]
    if tree is None or type(tree) in _SCALARS:
        return tree
    raise ValueError("not a frozen tree")
