"""Every folder of tests is collected: pytest skips folders whose names match ``norecursedirs``
(its default list has ``dist`` and ``build``), which once hid tests/dist without a word."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: pytest's own list when pyproject sets none
DEFAULT = ["*.egg", ".*", "_darcs", "build", "CVS", "dist", "node_modules", "venv", "{arch}"]


def test_no_test_folder_matches_norecursedirs() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    patterns = config.get("norecursedirs", DEFAULT)
    folders = {p.parent for p in (ROOT / "tests").rglob("test_*.py")}
    hidden = sorted(
        str(f.relative_to(ROOT))
        for f in folders
        for part in f.relative_to(ROOT).parts
        if any(fnmatch.fnmatch(part, pat) for pat in patterns)
    )
    assert hidden == [], f"pytest would not collect {hidden}: rename them or change norecursedirs"
    assert (ROOT / "tests" / "dist" / "test_celery.py").exists()
