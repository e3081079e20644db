"""serve's lost-worker recovery: a run held by a ``runner worker`` whose heartbeat is older than
``executor.lost_after_s`` ends ``unknown`` (reason ``worker_lost``); the pool then applies the
job's retry policy as for a failed run. Each row is changed by one guarded UPDATE, so two serves
(a leader and a late one) never both recover it.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from runner.clock import iso
from runner.dist.remote import NOT_STARTED
from runner.statuses import RunStatus
from runner.store import Store
from runner.store.budget import settle
from runner.store import ledger


def recover_lost(store: Store, *, now: datetime, lost_after_s: float) -> list[str]:
    """Mark runs with a stale worker heartbeat ``unknown``; return their ids."""
    cutoff = iso(now - timedelta(seconds=lost_after_s)) or ""
    return [
        row.id
        for row in ledger.stale_runs(store, before=cutoff, except_worker=NOT_STARTED)
        if ledger.declare_lost(
            store,
            row.id,
            error=f"worker {row.worker} stopped sending heartbeats (last at {row.heartbeat_at})",
            now=now,
            stale_before=cutoff,
        )
    ]


class LostRunsTicker:
    """The serve ticker that runs ``recover_lost`` every ``every`` seconds."""

    name = "lost-runs"

    def __init__(self, store: Store, log: logging.Logger, *, every: float, lost_after_s: float):
        self.store, self.log, self.every, self.lost_after_s = store, log, every, lost_after_s
        self._next: datetime | None = None

    def tick(self, now: datetime) -> None:
        if self._next is not None and now < self._next:
            return
        self._next = now + timedelta(seconds=self.every)
        for run_id in recover_lost(self.store, now=now, lost_after_s=self.lost_after_s):
            self.log.warning("run %s: its worker stopped sending heartbeats; marked unknown (worker_lost)", run_id)

    def next_wake(self, now: datetime) -> datetime | None:
        return self._next

    def close(self) -> None:
        return None
