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


def test_the_forkservers_config_is_reused_only_while_the_file_is_unchanged(tmp_path) -> None:
    from runner.serve.launcher import ConfigCache
    from runner.settings import Settings

    path = tmp_path / "config.yaml"
    path.write_text("serve: {max_parallel: 7}\n")
    cache = ConfigCache()
    cache.load(path)

    def fresh() -> Settings:
        return Settings(home=tmp_path, jobs_path=tmp_path / "jobs.yaml", config_path=path)

    reused = fresh()
    assert cache.apply(reused) and reused.config.serve.max_parallel == 7
    path.write_text("serve: {max_parallel: 9}\n")  # same size, new content
    changed = fresh()
    assert not cache.apply(changed) and changed.config.serve.max_parallel == 9
    cache.load(path)
    assert cache.apply(fresh())
    path.chmod(0o644)
    assert not cache.apply(fresh())  # a chmod counts too (the literal-key check reads the mode)
