"""The run ledger and its events."""

from __future__ import annotations

from typing import Any


def apply(db: Any) -> None:
    db["runs"].create(
        {
            "id": str,
            "job": str,
            "slot": str,
            "trigger": str,
            "status": str,
            "reason": str,
            "created_at": str,
            "started_at": str,
            "ended_at": str,
            "model": str,
            "iterations": int,
            "prompt_tokens": int,
            "completion_tokens": int,
            "cost_usd": float,
            "output_path": str,
            "delivery": str,
            "error": str,
            "pid": int,
            "pid_start": str,
            "host": str,
            "attempt": int,
            "parent_run": str,
            "task_id": str,
            "waited_s": float,
        },
        pk="id",
        not_null={"job", "trigger", "status", "created_at"},
        defaults={"iterations": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0, "attempt": 1},
    )
    db.execute("CREATE UNIQUE INDEX runs_job_slot ON runs(job, slot, attempt) WHERE slot IS NOT NULL")
    db.execute("CREATE INDEX runs_job_created ON runs(job, created_at)")
    db.execute("CREATE INDEX runs_status ON runs(status)")
    db["run_events"].create(
        {"run_id": str, "seq": int, "ts": str, "kind": str, "payload": str},
        pk=("run_id", "seq"),
        not_null={"ts", "kind"},
    )
