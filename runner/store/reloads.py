"""The reload of jobs.yaml serve refused last, in ``serve_instance`` (m0022): written by serve's
reload ticker, cleared by the next reload it applies, read by the dashboard."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from runner.clock import iso
from runner.store import Store


@dataclass(frozen=True)
class RefusedReload:
    at: str
    problem: str
    digest: str


def record_refused(store: Store, *, problem: str, digest: str, now: datetime) -> None:
    with store.transaction() as conn:
        conn.execute(
            "UPDATE serve_instance SET reload_refused_at=?, reload_problem=?, reload_digest=? WHERE id=1",
            (iso(now), problem, digest),
        )


def clear_refused(store: Store) -> None:
    """A reload was applied: nothing refused stands any more (no write when nothing was)."""
    if refused_reload(store) is None:
        return
    with store.transaction() as conn:
        conn.execute(
            "UPDATE serve_instance SET reload_refused_at=NULL, reload_problem=NULL, reload_digest=NULL WHERE id=1"
        )


def refused_reload(store: Store) -> RefusedReload | None:
    row = store.one("SELECT reload_refused_at, reload_problem, reload_digest FROM serve_instance WHERE id=1")
    if row is None or row["reload_refused_at"] is None:
        return None
    return RefusedReload(row["reload_refused_at"], row["reload_problem"] or "", row["reload_digest"] or "")
