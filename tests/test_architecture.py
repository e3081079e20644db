"""The shape of the code: every module imports on its own, and runner's packages form no import
cycle (imports inside functions and under TYPE_CHECKING count: they are dependencies too)."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import runner

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (runner,)

# Package edges that close a cycle today, each with why; the test fails when one is gone, so the
# list only shrinks. Do not add to it: move the code to the package it belongs to instead.
ALLOWED: dict[tuple[str, str], str] = {
    ("runner.config", "runner.tools"): "jobs.yaml validation checks `toolsets:` names against the tool registry",
    (
        "runner.kanban",
        "runner.run",
    ): "the kanban worker (kanban/work.py) executes a run; tools/kanban.py uses the board",
}


def module_names() -> list[str]:
    names: list[str] = []
    for package in PACKAGES:
        names.append(package.__name__)

        def fail(name: str) -> None:
            raise ImportError(f"cannot walk into {name}")

        names += [m.name for m in pkgutil.walk_packages(package.__path__, f"{package.__name__}.", onerror=fail)]
    return sorted(n for n in names if not n.endswith(".__main__"))  # importing __main__ runs the program


# a fresh interpreter forks once per module, so each import starts from an empty sys.modules
IMPORT_EACH = """
import os, sys, traceback
failed = 0
for name in sys.argv[1:]:
    pid = os.fork()
    if pid == 0:
        try:
            __import__(name)
        except BaseException:
            print(f"--- {name}", flush=True)
            traceback.print_exc(file=sys.stdout)
            sys.stdout.flush()
            os._exit(1)
        os._exit(0)
    failed += os.waitpid(pid, 0)[1] != 0
sys.exit(1 if failed else 0)
"""


def test_every_module_imports_on_its_own() -> None:
    names = module_names()
    assert "runner.serve.daemon" in names and "runner.backends.local" in names
    proc = subprocess.run(
        [sys.executable, "-c", IMPORT_EACH, *names], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


# -- the import graph ----------------------------------------------------------------------
def source_modules() -> dict[str, Path]:
    """Module name -> file, for every module of runner/ (packages by their __init__)."""
    out: dict[str, Path] = {}
    for package in PACKAGES:
        base = Path(package.__path__[0])
        for path in base.rglob("*.py"):
            parts = [package.__name__, *path.relative_to(base).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def imported_names(path: Path, module: str) -> set[str]:
    """Every module name an ``import`` anywhere in the file may refer to (``from a import b``
    gives ``a`` and ``a.b``; relative imports resolved against ``module``)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def group_of(module: str, modules: Mapping[str, Path]) -> str:
    """The package a module counts in: ``runner.X`` for a subpackage X of runner, the module
    itself for runner's top-level modules (settings, errors, ...)."""
    parts = module.split(".")
    if parts[0] != "runner":
        return parts[0]
    if len(parts) >= 2 and modules[".".join(parts[:2])].name == "__init__.py":
        return ".".join(parts[:2])
    return module


def package_graph() -> dict[str, dict[str, set[str]]]:
    """Package -> package it imports -> the module-level edges behind it (``a -> b``)."""
    modules = source_modules()
    graph: dict[str, dict[str, set[str]]] = {}
    for module, path in modules.items():
        source = group_of(module, modules)
        for name in imported_names(path, module):
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if not name:
                continue
            target = group_of(name, modules)
            if target != source:
                graph.setdefault(source, {}).setdefault(target, set()).add(f"{module} -> {name}")
    return graph


def find_cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (each holds a cycle), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    nodes = sorted(set(graph) | {t for targets in graph.values() for t in targets})

    def visit(node: str) -> None:  # Tarjan; the graph of packages is small enough to recurse
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in nodes:
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_import_cycle_between_packages() -> None:
    graph = package_graph()
    stale = [edge for edge in ALLOWED if edge[1] not in graph.get(edge[0], {})]
    assert not stale, f"allowed edges that no longer exist (remove them from ALLOWED): {stale}"
    pruned = {src: {dst for dst in targets if (src, dst) not in ALLOWED} for src, targets in graph.items()}
    cycles = find_cycles(pruned)
    detail = [
        f"{a} -> {b}: {sorted(graph[a][b])[:3]}"
        for cycle in cycles
        for a in cycle
        for b in cycle
        if b in pruned.get(a, set())
    ]
    assert cycles == [], "import cycles between packages:\n" + "\n".join(detail)


def test_the_cycle_check_finds_a_planted_cycle() -> None:
    acyclic = {"runner.cli": {"runner.serve", "runner.store"}, "runner.serve": {"runner.store"}}
    assert find_cycles(acyclic) == []
    planted = {**acyclic, "runner.store": {"runner.errors", "runner.cli"}}
    assert find_cycles(planted) == [["runner.cli", "runner.serve", "runner.store"]]
    assert find_cycles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}) == [["a", "b"], ["c", "d"]]


def test_the_graph_sees_imports_inside_functions_and_type_checking(tmp_path: Path) -> None:
    path = tmp_path / "mod.py"
    path.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from runner.store import Store\n"
        "def f():\n    from . import sibling\n    import runner.serve.daemon\n",
        encoding="utf-8",
    )
    names = imported_names(path, "runner.kanban.mod")
    assert {"runner.store.Store", "runner.kanban.sibling", "runner.serve.daemon"} <= names


# SQL on the tables the store owns (runs, tasks, credentials) lives in runner/store only: give the
# store an operation (runner/store/ledger.py for runs, board.py for tasks, keys.py for credentials).
OWNED_TABLES = re.compile(r"\b(?:UPDATE|INSERT\s+INTO|DELETE\s+FROM|FROM|JOIN)\s+(?:runs|tasks|credentials)\b", re.I)


def sql_on_owned_tables(path: Path) -> bool:
    """Whether a string in ``path`` (docstrings aside) is SQL on runs, tasks or credentials."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return any(
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and OWNED_TABLES.search(node.value)
        for node in ast.walk(tree)
    )


def test_no_sql_on_the_stores_tables_outside_the_store() -> None:
    found = {
        str(path.relative_to(ROOT))
        for package in ("runner",)
        for path in (ROOT / package).rglob("*.py")
        if not str(path.relative_to(ROOT)).startswith("runner/store/") and sql_on_owned_tables(path)
    }
    assert not found, f"SQL on runs/tasks/credentials outside runner/store: {sorted(found)}; add a store operation"


def test_the_sql_check_finds_planted_sql_and_ignores_docstrings(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text('"""Reads FROM runs in its docstring."""\nQ = "UPDATE runs SET status = ?"\n')
    assert sql_on_owned_tables(planted)
    planted.write_text('"""Reads FROM runs in its docstring."""\nQ = "SELECT 1 FROM leases"\n')
    assert not sql_on_owned_tables(planted)


# Functions named by a "module:function" string, not imported: the warm forkserver's entries
# (runner.run.forks imports and calls them in its helper and its children, which serve and the kanban
# dispatcher never import) and the backend registry (a backend's SDK loads only when chosen). The
# import graph above cannot see these; any other dependency is an import.
NAMED_BY_STRING: dict[str, set[str]] = {
    "runner/serve/launcher.py": {
        "runner.serve.launcher:worker_main",
        "runner.serve.launcher:preload_config",
        "runner.serve.reuse:prepare_warm_up",
    },
    "runner/serve/reuse.py": {"runner.serve.reuse:reuse_main"},
    "runner/kanban/dispatch.py": {"runner.kanban.work:forked_main"},
    "runner/backends/__init__.py": {
        "runner.backends.local:from_spec",
        "runner.backends.docker:from_spec",
        "runner.backends.ssh:from_spec",
    },
}
FUNCTION_BY_NAME = re.compile(r"^runner(?:\.\w+)*:\w+$")


def test_functions_named_by_string_are_the_listed_ones_and_exist() -> None:
    found: dict[str, set[str]] = {}
    for package in ("runner",):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and FUNCTION_BY_NAME.match(node.value):
                    found.setdefault(str(path.relative_to(ROOT)), set()).add(node.value)
    assert found == NAMED_BY_STRING, "import the function instead of naming it by string (or list a forkserver entry)"
    for name in set().union(*NAMED_BY_STRING.values()):
        module, _, function = name.partition(":")
        assert callable(getattr(importlib.import_module(module), function)), name
