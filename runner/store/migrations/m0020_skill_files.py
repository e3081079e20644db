"""The home skills in the store (issue 17; ``runner.skills.shared``): with PostgreSQL every machine
sees the same agent-written skills. ``skill_files``: each file of the tree by its path relative to
the skills folder, its bytes and SHA-256; ``skill_tree.version``: moved by every change, so a
machine whose copy is current finds out with one query. Written only when the store is PostgreSQL
(a SQLite store sits beside the one machine's skills folder)."""

from __future__ import annotations

from typing import Any

TREE = "CREATE TABLE skill_tree (id INTEGER PRIMARY KEY CHECK (id = 1), version {int} NOT NULL, updated_at TEXT)"
FILES = "CREATE TABLE skill_files (path TEXT PRIMARY KEY, body {blob} NOT NULL, sha256 TEXT NOT NULL, updated_at TEXT NOT NULL)"


def _create(db: Any, *, blob: str, integer: str) -> None:
    db.execute(FILES.format(blob=blob))
    db.execute(TREE.format(int=integer))
    db.execute("INSERT INTO skill_tree (id, version) VALUES (1, 0)")


def apply(db: Any) -> None:
    _create(db, blob="BLOB", integer="INTEGER")


def apply_postgresql(db: Any) -> None:
    _create(db, blob="BYTEA", integer="BIGINT")
