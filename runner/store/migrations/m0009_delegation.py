"""Subagents: a child run (``delegate_task``) names the run that started it in ``parent_run_id``."""

from __future__ import annotations

from typing import Any


def apply(db: Any) -> None:
    db.execute("ALTER TABLE runs ADD COLUMN parent_run_id TEXT")
    db.execute("CREATE INDEX runs_parent_run_id ON runs(parent_run_id) WHERE parent_run_id IS NOT NULL")
