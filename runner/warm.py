"""Make what is already imported ready before a process forks workers from it.

Start-up laziness (``runner.lazyre.LazyPattern``, pydantic ``defer_build``) moves work from import
to first use. A forkserver would then pay that work again in every forked child; ``ready_loaded``
does it once in the parent: it compiles the ``LazyPattern`` objects held by runner's loaded
modules (at module level, or inside module-level lists, tuples and dicts) and builds the deferred
validators of runner's loaded pydantic models. Modules not imported yet are left alone.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from runner.lazyre import LazyPattern

PACKAGES = ("runner", "backends")
_DEPTH = 3  # containers inside containers (e.g. a table of (name, pattern, reason) tuples)


@dataclass(frozen=True)
class Readied:
    """What ``ready_loaded`` did: patterns compiled and models built."""

    patterns: int
    models: int


def ready_loaded() -> Readied:
    """Compile every LazyPattern and build every deferred model of the loaded runner modules."""
    return Readied(patterns=_compile_patterns(), models=_build_models())


def _ours(name: str) -> bool:
    return name.split(".", 1)[0] in PACKAGES


def _compile_patterns() -> int:
    seen: set[int] = set()
    count = 0
    for name, module in list(sys.modules.items()):
        if module is None or not _ours(name):
            continue
        for pattern in _patterns(vars(module).values(), _DEPTH):
            if id(pattern) not in seen:
                seen.add(id(pattern))
                pattern.compiled  # noqa: B018 - compiling is the point
                count += 1
    return count


def _patterns(values: Any, depth: int) -> Iterator[LazyPattern]:
    for value in values:
        if isinstance(value, LazyPattern):
            yield value
        elif depth > 0 and isinstance(value, list | tuple):
            yield from _patterns(value, depth - 1)
        elif depth > 0 and isinstance(value, dict):
            yield from _patterns(value.values(), depth - 1)


def _build_models() -> int:
    from pydantic import BaseModel

    count = 0
    for model in _subclasses(BaseModel):
        if _ours(model.__module__) and model.model_config.get("defer_build") and "<" not in model.__qualname__:
            model.model_rebuild(force=True)
            count += 1
    return count


def _subclasses(cls: type) -> Iterator[Any]:
    subs: list[type] = cls.__subclasses__()
    for sub in subs:
        yield sub
        yield from _subclasses(sub)
