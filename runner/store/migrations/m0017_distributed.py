"""Past one machine (docs/distributed.md): which ``runner worker`` took a run (``runs.worker``), its
heartbeat (``runs.heartbeat_at``; serve marks a run whose heartbeat went stale ``unknown``), a stop
serve asks of a remote run (``runs.stop_request``: ``timeout``, ``replaced``, ``shutdown``,
``kill``), and named leases (``leases``: the scheduler lease that lets one ``runner serve`` lead
while a standby waits; ``backend``: on PostgreSQL, the server process of the connection holding
the lease's advisory lock)."""

from __future__ import annotations

from typing import Any


def apply(db: Any) -> None:
    db.execute("ALTER TABLE runs ADD COLUMN worker TEXT")
    db.execute("ALTER TABLE runs ADD COLUMN heartbeat_at TEXT")
    db.execute("ALTER TABLE runs ADD COLUMN stop_request TEXT")
    db.execute("CREATE INDEX IF NOT EXISTS runs_worker ON runs (worker, status)")
    db.execute(
        "CREATE TABLE IF NOT EXISTS leases ("
        "name TEXT PRIMARY KEY, holder TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL, "
        "acquired_at TEXT NOT NULL, renewed_at TEXT NOT NULL, expires_at TEXT NOT NULL, backend INTEGER)"
    )
