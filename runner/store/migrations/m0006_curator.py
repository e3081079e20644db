"""The Curator: one row per pass, its stored state, and an index for "when did the last run end"."""

from __future__ import annotations

from typing import Any


def apply(db: Any) -> None:
    db["curator_runs"].create(
        {
            "id": str,
            "trigger": str,  # manual | idle
            "status": str,  # running | succeeded | failed
            "started_at": str,
            "ended_at": str,
            "examined": int,
            "stale": int,
            "archived": int,
            "reactivated": int,
            "changes": str,  # JSON list of {name, from, to, reason}
            "report_path": str,
            "snapshot_path": str,
            "error": str,
        },
        pk="id",
        not_null={"trigger", "status", "started_at"},
        defaults={"examined": 0, "stale": 0, "archived": 0, "reactivated": 0},
    )
    db.execute("CREATE INDEX curator_runs_started ON curator_runs(started_at)")
    db["curator_state"].create(
        {"id": int, "last_pass_at": str, "seeded": int, "paused": int, "paused_at": str},
        pk="id",
        defaults={"seeded": 0, "paused": 0},
    )
    db.execute("INSERT INTO curator_state (id, seeded, paused) VALUES (1, 0, 0)")
    db.execute("CREATE INDEX runs_ended ON runs(ended_at)")
