"""Every module serve's forkserver preloads exists (a renamed module would only show as a slower fire)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import runner.serve


def test_every_preloaded_module_exists() -> None:
    source = Path(runner.serve.__path__[0], "prefork.py").read_text(encoding="utf-8")
    names = next(
        ast.literal_eval(node.value)
        for node in ast.parse(source).body
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "MODULES" for t in node.targets)
    )
    assert names
    for name in names:
        importlib.import_module(name)  # ModuleNotFoundError names the stale entry
