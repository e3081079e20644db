"""Where the operator's tools live (``tools/`` beside jobs.yaml, config.yaml's ``tools_dirs:``)
and loading them; the loader itself is ``runner.tools._own``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from runner.tools import known_toolset_names
from runner.tools._own import load

if TYPE_CHECKING:
    from runner.tools._own import Loaded


def tool_dirs(jobs_path: Path, config_path: Path, configured: Sequence[str]) -> tuple[Path, ...]:
    """``tools/`` beside jobs.yaml (when it exists) and each ``tools_dirs:`` entry (relative ones
    to config.yaml's folder), each once."""
    out = [jobs_path.parent / "tools"] if (jobs_path.parent / "tools").is_dir() else []
    for entry in configured:
        path = Path(entry).expanduser()
        out.append(path if path.is_absolute() else config_path.parent / path)
    return tuple(dict.fromkeys(p.resolve() for p in out))


def load_own(dirs: Sequence[Path]) -> Loaded:
    """The operator's tools, loaded afresh (their files run each time: no process-wide cache)."""

    return load(dirs, taken=known_toolset_names())
