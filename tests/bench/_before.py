"""The same figure for this tree and for main before a change, measured side by side.

A *tree* is a checkout of runner and the Python that has its dependencies. "main before" is
``$RUNNER_BENCH_BASE`` (default /work/base) run by ``$RUNNER_BENCH_BASE_PYTHON`` (default
/tmp/venv-base/bin/python); when it is missing, only this tree is measured. Measurements alternate
between the trees, so load on the machine hits both alike. ``in_tree`` runs a bench file's own
measuring function under either tree, for figures measured in-process.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import REPO, clean_env


@dataclass(frozen=True)
class Tree:
    name: str
    repo: Path
    python: str

    def env(self, **extra: str) -> dict[str, str]:
        return clean_env(PYTHONPATH=str(self.repo), **extra)


def trees() -> list[Tree]:
    here = Tree("this tree", REPO, sys.executable)
    base = Path(os.environ.get("RUNNER_BENCH_BASE", "/work/base"))
    python = os.environ.get("RUNNER_BENCH_BASE_PYTHON", "/tmp/venv-base/bin/python")
    if base.resolve() == REPO or not (base / "runner").is_dir() or not Path(python).exists():
        print(f"(main before: {base} or {python} missing; only this tree is measured)")
        return [here]
    return [here, Tree("main before", base, python)]


@dataclass(frozen=True)
class Timing:
    wall: float  # median seconds
    cpu: float  # median user+system seconds of the child


def time_argv(
    by_tree: dict[str, Sequence[str]], envs: dict[str, dict[str, str]], cwd: Path, runs: int
) -> dict[str, Timing]:
    """Median wall and CPU time of each tree's argv, the trees alternating, after one warm-up each."""
    walls: dict[str, list[float]] = {name: [] for name in by_tree}
    cpus: dict[str, list[float]] = {name: [] for name in by_tree}
    for round_ in range(runs + 1):
        for name, argv in by_tree.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            proc = subprocess.run(list(argv), env=envs[name], cwd=cwd, capture_output=True)
            wall = time.perf_counter() - started
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if proc.returncode != 0:
                raise SystemExit(f"{name}: {' '.join(argv)} failed: {proc.stderr.decode()[-800:]}")
            if round_:  # the first round writes bytecode and warms the page cache
                walls[name].append(wall)
                cpus[name].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return {n: Timing(statistics.median(walls[n]), statistics.median(cpus[n])) for n in by_tree}


def side_by_side(label: str, timings: dict[str, Timing], target: str = "") -> None:
    """One line: this tree's figure, then main before's (wall, CPU in brackets)."""
    shown = "   ".join(f"{name} {t.wall:.3f} s (cpu {t.cpu:.3f})" for name, t in timings.items())
    print(f"{label:<44} {shown}" + (f"   target {target}" if target else ""))


_IN_TREE = """import importlib, json, sys
import runner, tests  # this tree's runner and tests packages, before the bench file puts ours on sys.path
sys.path.insert(0, sys.argv[1])
print(json.dumps(getattr(importlib.import_module(sys.argv[2]), sys.argv[3])(*json.loads(sys.argv[4]))))
"""


def in_tree(tree: Tree, bench: str, function: str, *args: Any) -> Any:
    """What ``function(*args)`` of tests/bench/BENCH.py (this checkout's file) returns, as JSON, run
    by ``tree``'s Python on ``tree``'s runner in a fresh process."""
    argv = [tree.python, "-c", _IN_TREE, str(Path(__file__).parent), bench, function, json.dumps(args)]
    env = tree.env(RUNNER_BENCH_TREE=str(tree.repo))
    proc = subprocess.run(argv, env=env, cwd=tree.repo, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{tree.name}: {bench}.{function} failed: {proc.stderr[-800:]}")
    return json.loads(proc.stdout.splitlines()[-1])


def each_tree(bench: str, function: str, *args: Any) -> dict[str, Any]:
    """``in_tree`` for this tree, then main before (when there is one): each tree's result by name."""
    return {tree.name: in_tree(tree, bench, function, *args) for tree in trees()}


def or_reason(tree: Tree, measure: Callable[[], Any]) -> Any:
    """``measure()``; for main before, a failure (its Python may lack an optional extra) becomes the
    string "not measured: WHY" to print in its place. This tree's failures stop the benchmark."""
    try:
        return measure()
    except SystemExit as exc:
        if tree.repo == REPO:
            raise
        return "not measured: " + str(exc).strip().splitlines()[-1].split(": ", 1)[-1]


def python_with(tree: Tree, module: str) -> tuple[str, str]:
    """A Python to run ``tree``'s checkout with when it needs ``module`` (an optional extra):
    ``tree``'s own when it imports it, else this tree's (the same pinned dependencies, and the
    extra), with a note saying so to print beside the figure."""
    if subprocess.run([tree.python, "-c", f"import {module}"], capture_output=True).returncode == 0:
        return tree.python, ""
    return sys.executable, f"its code on this tree's Python: its own has no {module}"
