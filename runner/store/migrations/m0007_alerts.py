"""Alerts: the per-job throttle state, and whether a run's delivery failed."""

from __future__ import annotations

from typing import Any


def apply(db: Any) -> None:
    db["alert_state"].create(
        {
            "job": str,
            "topic": str,  # failure | delivery
            "streak": int,  # events of this topic since the last recovery
            "suppressed": int,  # alerts held back by the throttle since the last one sent
            "last_sent_at": str,
            "last_run": str,
        },
        pk=("job", "topic"),
        defaults={"streak": 0, "suppressed": 0},
    )
    db.execute("ALTER TABLE runs ADD COLUMN delivery_failed INTEGER")
