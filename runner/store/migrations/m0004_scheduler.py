"""Scheduler state: per-job slots and pause flags, serve's heartbeat, retry due times."""

from __future__ import annotations

from typing import Any


def apply(db: Any) -> None:
    # One row per scheduled job serve has seen (or `runner jobs pause` touched).
    db["job_state"].create(
        {
            "job": str,
            "schedule": str,  # the schedule text the slots below belong to
            "first_seen": str,
            "last_slot": str,  # newest slot with a ledger row (or passed over while paused)
            "resolved_at": str,  # `in` one-shots: the fire time; `every`: the first slot
            "paused": int,
            "paused_reason": str,
            "paused_at": str,
            "failure_streak": int,
            "updated_at": str,
        },
        pk="job",
        not_null={"paused", "failure_streak"},
        defaults={"paused": 0, "failure_streak": 0},
    )
    # The one `runner serve` of this RUNNER_HOME: who it is and when it last said so.
    db["serve_instance"].create(
        {
            "id": int,
            "pid": int,
            "pid_start": str,
            "host": str,
            "started_at": str,
            "heartbeat_at": str,
            "stopped_at": str,
            "jobs_path": str,
            "heartbeat_s": float,
            "running": int,
            "waiting": int,
        },
        pk="id",
    )
    # A retry row is written when the failure is seen; it may start no earlier than this.
    db["runs"].add_column("not_before", str)
    db.execute("CREATE INDEX runs_queued ON runs(status, trigger) WHERE status = 'queued'")
