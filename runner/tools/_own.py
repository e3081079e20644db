"""The operator's own tools: Python files in ``tools/`` beside jobs.yaml (and config.yaml's
``tools_dirs:``) whose functions carry ``@tool`` (``from runner.tools import tool``).

Operator code is trusted: it runs in the runner process, outside the backend and the approval
gate, like a ``pre_run`` script. Each load executes the files afresh into new module objects, so
nothing is kept between runs (or tests). The schema comes from the type hints (pydantic) and the
docstring (its first paragraph describes the tool; ``Args:`` lines describe the parameters).
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import json
import re
import sys
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.backends.base import truncate_text
from runner.tools import TOOLSETS, ToolEntry, ToolResult

if TYPE_CHECKING:
    from runner.tools import Registry
    from runner.tools.context import ToolContext

MARK = "__runner_tool__"
TOOL_NAME = re.compile(r"^[a-zA-Z][a-zA-Z0-9_-]{0,63}$")
TOOLSET_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


@dataclass(frozen=True)
class Mark:
    toolset: str
    name: str | None
    check: Callable[..., Any] | None


class ToolFileError(Exception):
    """A tools file that cannot be loaded; the message starts with ``FILE:LINE:``."""


@dataclass(frozen=True)
class Loaded:
    entries: tuple[ToolEntry, ...]
    problems: tuple[str, ...]  # "FILE:LINE: message", one per broken file or tool


def mark(fn: Callable[..., Any], *, check: Callable[..., Any] | None, toolset: str, name: str | None) -> Any:
    if not callable(fn):
        raise TypeError("@tool decorates a function")
    setattr(fn, MARK, Mark(toolset, name, check))
    return fn


def load(dirs: Iterable[Path], taken: Iterable[str] = ()) -> Loaded:
    """Every tool in the ``*.py`` files of ``dirs`` (files starting with ``_`` are helpers).
    ``taken``: names already in use (the builtin tools and toolsets)."""
    used = set(taken)
    entries: list[ToolEntry] = []
    problems: list[str] = []
    for folder in dirs:
        if not folder.is_dir():
            problems.append(f"{folder}: tools folder not found (tools_dirs in config.yaml)")
            continue
        for path in sorted(folder.glob("*.py")):
            if path.name.startswith("_"):
                continue
            try:
                found = load_file(path)
            except ToolFileError as exc:
                problems.append(str(exc))
                continue
            for entry, line in found:
                where = f"{path}:{line}"
                if entry.name in used:
                    problems.append(f"{where}: tool name {entry.name!r} is already taken")
                elif entry.toolset in TOOLSETS or entry.toolset.startswith("mcp"):
                    problems.append(f"{where}: toolset {entry.toolset!r} is reserved")
                else:
                    used.add(entry.name)
                    entries.append(entry)
    return Loaded(tuple(entries), tuple(problems))


def load_file(path: Path) -> list[tuple[ToolEntry, int]]:
    """The marked functions of one file with their line numbers; ToolFileError if it is broken."""
    module = _execute(path)
    out: list[tuple[ToolEntry, int]] = []
    for value in vars(module).values():
        found: Mark | None = getattr(value, MARK, None)
        if found is None or getattr(value, "__module__", None) != module.__name__:
            continue
        line = value.__code__.co_firstlineno if hasattr(value, "__code__") else 1
        try:
            out.append((_entry(value, found, path), line))
        except (TypeError, ValueError, NameError) as exc:
            raise ToolFileError(f"{path}:{line}: {exc}") from None
    return out


def _execute(path: Path) -> Any:
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:12]
    name = f"runner_operator_tools_{digest}_{re.sub(r'[^A-Za-z0-9_]', '_', path.stem)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ToolFileError(f"{path}:1: cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # pydantic resolves the hints through the module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(name, None)
        raise ToolFileError(f"{path}:{exc.lineno or 1}: syntax error: {exc.msg}") from None
    except Exception as exc:
        sys.modules.pop(name, None)
        raise ToolFileError(f"{path}:{_line_in(path, exc)}: {type(exc).__name__}: {exc}") from None
    return module


def _line_in(path: Path, exc: BaseException) -> int:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == path]
    return frames[-1].lineno or 1 if frames else 1


def _entry(fn: Callable[..., Any], found: Mark, path: Path) -> ToolEntry:
    name = found.name or fn.__name__
    if not TOOL_NAME.match(name):
        raise ValueError(f"tool name {name!r} must match {TOOL_NAME.pattern}")
    if not TOOLSET_NAME.match(found.toolset):
        raise ValueError(f"toolset {found.toolset!r} must match {TOOLSET_NAME.pattern}")
    summary, arg_docs = _docstring(inspect.getdoc(fn) or "")
    if not summary:
        raise ValueError(f"tool {name!r} needs a docstring (its first paragraph tells the model what it does)")
    model = _arguments_model(fn, name, arg_docs)
    return ToolEntry(
        name=name,
        toolset=found.toolset,
        description=summary,
        parameters=_clean_schema(model.model_json_schema()),
        handler=_handler(fn, model),
        check_fn=_check(found.check) if found.check is not None else None,
        source=f"operator {path}",
    )


def _docstring(doc: str) -> tuple[str, dict[str, str]]:
    """(the first paragraph, {parameter: description} from an ``Args:`` section)."""
    summary = doc.split("\n\n", 1)[0].strip()
    args: dict[str, str] = {}
    match = re.search(r"^(?:Args|Arguments|Parameters):\s*\n((?:[ \t]+.*\n?)+)", doc, re.M)
    if match:
        for line in match.group(1).splitlines():
            item = re.match(r"\s*(\w+)(?:\s*\([^)]*\))?\s*:\s*(.+)", line)
            if item:
                args[item.group(1)] = item.group(2).strip()
    return summary, args


def _arguments_model(fn: Callable[..., Any], name: str, docs: dict[str, str]) -> Any:
    from typing import get_type_hints

    from pydantic import ConfigDict, Field, create_model

    hints = get_type_hints(fn)
    fields: dict[str, Any] = {}
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {name!r}: *args and **kwargs cannot be described to the model")
        if param.name not in hints:
            raise TypeError(f"tool {name!r}: parameter {param.name!r} needs a type hint")
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (hints[param.name], Field(default, description=docs.get(param.name)))
    return create_model(f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The model's JSON schema without pydantic's titles; objects closed to other keys."""
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict):
            prop.pop("title", None)
    schema.setdefault("properties", {})
    schema["additionalProperties"] = False
    return schema


def _handler(fn: Callable[..., Any], model: Any) -> Callable[[dict[str, Any], ToolContext], ToolResult]:
    from pydantic import ValidationError

    def handle(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        try:
            values = model.model_validate(args)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors())
            return ToolResult(f"error: {problems}", failed=True)
        try:
            value = fn(**{k: getattr(values, k) for k in type(values).model_fields})
        except Exception as exc:  # operator code: any failure is the model's tool error (redacted by the loop)
            return ToolResult(f"error: {type(exc).__name__}: {exc}", failed=True)
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
        return ToolResult(truncate_text(text, ctx.output_chars))

    return handle


def _check(check: Callable[..., Any]) -> Callable[[ToolContext], bool | str]:
    """An operator's ``check`` (no argument, or the ToolContext) as a registry check."""
    takes_ctx = bool(inspect.signature(check).parameters)

    def run(ctx: ToolContext) -> bool | str:
        try:
            verdict = check(ctx) if takes_ctx else check()
        except Exception as exc:
            return f"its check raised {type(exc).__name__}: {exc}"
        if verdict is True:
            return True
        return verdict if isinstance(verdict, str) and verdict else "its check said no"

    return run


def add_to(registry: Registry, loaded: Loaded) -> None:
    for entry in loaded.entries:
        registry.add(entry)
