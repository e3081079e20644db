"""Tool registry: the tools a model may call, grouped in toolsets.

Each module in this package defines ``register(registry)`` and adds its entries; ``discover()``
imports every module here, so a new tool file is picked up without a hand-kept list. The
registry is an object (not a module-level global), so tests build their own.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runner.tools.context import ToolContext


@dataclass(frozen=True)
class ToolResult:
    """What a handler returns: the text the model sees and whether the call failed (a non-zero
    exit code, a blocked command). Failed calls count towards loop detection."""

    text: str
    failed: bool = False


Handler = Callable[[dict[str, Any], "ToolContext"], ToolResult]
ChangesFiles = Callable[[dict[str, Any]], bool]  # may a call with these arguments change the workdir's files?
CheckFn = Callable[["ToolContext"], "bool | str"]  # True: offered; False or a reason: not offered

TOOLSETS = ("terminal", "files", "memory", "web", "skills", "kanban", "delegate", "session_search", "schedule")
BUILTIN = "builtin"  # ToolEntry.source of the tools in this package (others: "mcp:SERVER", "operator FILE")


def no_files(args: dict[str, Any]) -> bool:
    """``changes_files`` of a tool that writes only runner's own state (memory, skills, the board)."""
    return False


class ToolError(Exception):
    """A problem the model should hear about (bad path, no match); not an infrastructure failure."""


@dataclass(frozen=True)
class ToolEntry:
    name: str
    toolset: str
    description: str
    parameters: dict[str, Any]
    handler: Handler
    check_fn: CheckFn | None = None
    read_only: bool = False  # changes nothing anywhere: several in one model turn run concurrently
    source: str = BUILTIN  # shown by `runner tools list`: builtin | mcp:SERVER | operator FILE
    alias: str = ""  # one more name a job's ``toolsets:`` may pick it by (``mcp:SERVER/TOOL``)
    # may a call change the workdir's files (a checkpoint is taken before it)? None: every call
    # of a tool that is not ``read_only`` may (MCP and operator tools: runner cannot tell)
    changes_files: ChangesFiles | None = None

    def may_change_files(self, args: dict[str, Any]) -> bool:
        if self.read_only:
            return False
        return True if self.changes_files is None else self.changes_files(args)

    def picked_by(self, wanted: set[str]) -> bool:
        return self.toolset in wanted or self.name in wanted or (bool(self.alias) and self.alias in wanted)

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def available(self, ctx: ToolContext) -> bool:
        return self.unavailable_reason(ctx) is None

    def unavailable_reason(self, ctx: ToolContext) -> str | None:
        """None when the tool is offered in this run, else why not (a check may return its reason)."""
        if self.check_fn is None:
            return None
        verdict = self.check_fn(ctx)
        if verdict is True:
            return None
        return verdict if isinstance(verdict, str) and verdict else "not available in this run"


@dataclass
class Registry:
    entries: dict[str, ToolEntry] = field(default_factory=dict)
    modules: list[str] = field(default_factory=list)

    def add(self, entry: ToolEntry) -> None:
        if entry.name in self.entries:
            raise ValueError(f"tool {entry.name!r} registered twice")
        if entry.source == BUILTIN and entry.toolset not in TOOLSETS:
            raise ValueError(f"tool {entry.name!r}: unknown toolset {entry.toolset!r}")
        self.entries[entry.name] = entry

    def tool(
        self,
        name: str,
        toolset: str,
        description: str,
        parameters: dict[str, Any],
        check_fn: CheckFn | None = None,
        *,
        read_only: bool = False,
        changes_files: ChangesFiles | None = None,
    ) -> Callable[[Handler], Handler]:
        """Decorator form of ``add``."""

        def wrap(fn: Handler) -> Handler:
            entry = ToolEntry(name, toolset, description, parameters, fn, check_fn, read_only)
            self.add(entry if changes_files is None else replace(entry, changes_files=changes_files))
            return fn

        return wrap

    def names(self) -> set[str]:
        return set(self.entries) | set(TOOLSETS)

    def select(self, toolsets: Iterable[str], ctx: ToolContext) -> list[ToolEntry]:
        """Entries picked by a job's ``toolsets:`` (toolset or tool names) whose check passes."""
        wanted = set(toolsets)
        picked = [e for e in self.entries.values() if e.picked_by(wanted) and e.available(ctx)]
        return sorted(picked, key=listing_order)

    def unavailable(self, toolsets: Iterable[str], ctx: ToolContext) -> dict[str, str]:
        """Tools a job's ``toolsets:`` picks that this run does not offer, with the reason."""
        wanted = set(toolsets)
        out: dict[str, str] = {}
        for e in sorted(self.entries.values(), key=lambda e: e.name):
            if e.picked_by(wanted):
                reason = e.unavailable_reason(ctx)
                if reason is not None:
                    out[e.name] = reason
        return out


def listing_order(entry: ToolEntry) -> tuple[int, str, str]:
    """Builtin toolsets in their fixed order, then the others (operator, MCP) by toolset name."""
    rank = TOOLSETS.index(entry.toolset) if entry.toolset in TOOLSETS else len(TOOLSETS)
    return rank, entry.toolset, entry.name


def discover() -> Registry:
    """A fresh registry holding every tool defined in this package."""
    registry = Registry()
    for info in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda m: m.name):
        if info.name.startswith("_") or info.name == "context":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        register = getattr(module, "register", None)
        if register is None:
            continue
        register(registry)
        registry.modules.append(info.name)
    return registry


_NAMES: set[str] | None = None


def known_toolset_names() -> set[str]:
    """Toolset and tool names accepted in jobs.yaml ``toolsets:`` (computed once per process)."""
    global _NAMES
    if _NAMES is None:
        _NAMES = discover().names()
    return _NAMES


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    check: Callable[..., Any] | None = None,
    toolset: str = "user",
    name: str | None = None,
) -> Any:
    """Mark an operator's function as a tool (``@tool`` or ``@tool(check=fn, toolset="name")``).

    Marking only: the function is unchanged and nothing is registered anywhere; a run loads the
    operator's tools folders into its own registry (``runner.tools._own``)."""
    from runner.tools._own import mark

    if fn is not None:
        return mark(fn, check=check, toolset=toolset, name=name)
    return lambda f: mark(f, check=check, toolset=toolset, name=name)


def compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
