"""Helpers for the skills and curator tests: writing SKILL.md folders, hashing a tree, Settings."""

from __future__ import annotations

import hashlib
import json
import os
import textwrap
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runner.settings import Settings

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def skill_md(
    name: str, description: str = "Does a thing well.", body: str = "# Steps\n1. Do it.\n", **meta: Any
) -> str:
    lines = ["---", f"name: {name}", f"description: {json.dumps(description)}"]
    for key, value in meta.items():
        lines.append(f"{key}: {value}")
    lines.append("---")
    return "\n".join(lines) + "\n" + textwrap.dedent(body)


def write_skill(root: Path, name: str, text: str | None = None, files: dict[str, str] | None = None) -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(text if text is not None else skill_md(name))
    for rel, content in (files or {}).items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return folder


def tree_hash(root: Path) -> str:
    """Hash of every path, file content and mode under ``root`` (dot files included)."""
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, root)
        digest.update(f"d {rel_dir} {os.stat(dirpath).st_mode:o}\n".encode())
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            digest.update(f"f {rel_dir}/{name} {st.st_mode:o}\n".encode())
            with open(path, "rb") as fh:
                digest.update(fh.read())
    return digest.hexdigest()


def settings_for(project: Any) -> Settings:
    return Settings.from_options(jobs=str(project.jobs_path), home=str(project.home))
