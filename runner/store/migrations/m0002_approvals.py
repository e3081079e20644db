"""The approvals audit table: every dangerous or hardline command and what was decided."""

from __future__ import annotations

from typing import Any


def apply(db: Any) -> None:
    db["approvals"].create(
        {
            "id": int,
            "run_id": str,
            "ts": str,
            "command": str,
            "level": str,
            "reasons": str,
            "policy": str,
            "decision": str,
            "decided_by": str,
        },
        pk="id",
        not_null={"ts", "command", "level", "decision", "decided_by"},
    )
    db.execute("CREATE INDEX approvals_run ON approvals(run_id)")
