"""Runs started by serve record when their worker process took them (``dispatched_at``): the
queue wait is ``dispatched_at - created_at``, the start overhead ``started_at - dispatched_at``."""

from __future__ import annotations

from typing import Any


def apply(db: Any) -> None:
    db.execute("ALTER TABLE runs ADD COLUMN dispatched_at TEXT")
