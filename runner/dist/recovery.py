"""serve's lost-worker recovery under ``executor: celery``: every ``every`` seconds the launcher's
``lost`` (``ledger.recover_stale``) ends ``unknown`` (reason ``worker_lost``) the runs held by a
``runner worker`` whose heartbeat is older than ``executor.lost_after_s``; the pool then applies
the job's retry policy as for a failed run.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from runner.serve.launcher import Launcher
from runner.store import Store


class LostRunsTicker:
    """The serve ticker that asks ``launcher.lost`` every ``every`` seconds."""

    name = "lost-runs"

    def __init__(self, launcher: Launcher[Any], store: Store, log: logging.Logger, *, every: float):
        self.launcher, self.store, self.log, self.every = launcher, store, log, every
        self._next: datetime | None = None

    def tick(self, now: datetime) -> None:
        if self._next is not None and now < self._next:
            return
        self._next = now + timedelta(seconds=self.every)
        for run_id in self.launcher.lost(self.store, now):
            self.log.warning("run %s: its worker stopped sending heartbeats; marked unknown (worker_lost)", run_id)

    def next_wake(self, now: datetime) -> datetime | None:
        return self._next

    def close(self) -> None:
        return None
