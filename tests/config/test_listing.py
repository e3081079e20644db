"""The `jobs list` cache's code stamp: any .py file under runner/, in any subpackage (runner/backends/ too)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runner.config import listing


def test_touching_a_file_in_a_subpackage_changes_the_stamp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nested = tmp_path / "runner" / "tools" / "deeper"
    nested.mkdir(parents=True)
    (tmp_path / "runner" / "__init__.py").write_text("")
    (nested / "mod.py").write_text("X = 1\n")
    (nested / "notes.txt").write_text("not code")
    monkeypatch.setattr(listing, "PACKAGE_DIRS", [tmp_path / "runner"])
    before = listing.code_stamp()
    os.utime(nested / "notes.txt", ns=(1, 1))
    assert listing.code_stamp() == before
    os.utime(nested / "mod.py", ns=(2_000_000_000, 2_000_000_000))
    assert listing.code_stamp() != before


def test_the_real_stamp_covers_runner_tools() -> None:
    path = Path(listing.PACKAGE_DIRS[0]) / "tools" / "files.py"
    st = path.stat()
    before = listing.code_stamp()
    try:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000))
        assert listing.code_stamp() != before
    finally:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert listing.code_stamp() == before
