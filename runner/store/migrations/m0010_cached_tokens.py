"""Cached prompt tokens: how many of a run's prompt tokens the provider served from its cache."""

from __future__ import annotations

from typing import Any


def apply(db: Any) -> None:
    db.execute("ALTER TABLE runs ADD COLUMN cached_tokens INTEGER NOT NULL DEFAULT 0")
