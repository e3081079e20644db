"""serve while its store cannot answer (``StoreUnavailable``: PostgreSQL restarting, the network
down, a lock held past the timeout): the loop keeps going and tries again every second instead
of exiting. Logged when the outage starts, every 30 s while it lasts and when it ends; the status
systemd shows says so. Nothing fires meanwhile: every tick needs the store, and a fire whose
transaction failed is due again at the next tick (catch-up applies to a long outage)."""

from __future__ import annotations

import logging
import time

from runner.serve.notify import sd_notify
from runner.store import StoreUnavailable

RETRY_S = 1.0
REPEAT_S = 30.0


class StoreOutage:
    def __init__(self, log: logging.Logger):
        self.log = log
        self.since: float | None = None  # monotonic start of the current outage
        self._logged = 0.0

    @property
    def ongoing(self) -> bool:
        return self.since is not None

    def failed(self, exc: StoreUnavailable) -> None:
        now = time.monotonic()
        if self.since is None:
            self.since = self._logged = now
            self.log.error("the store cannot answer: %s; nothing fires until it does (retrying every second)", exc)
            sd_notify("STATUS=store unavailable; retrying")
        elif now - self._logged >= REPEAT_S:
            self._logged = now
            self.log.error("the store still cannot answer after %.0f s: %s", now - self.since, exc)

    def answered(self) -> None:
        if self.since is None:
            return
        self.log.warning("the store answers again after %.1f s; firing resumes", time.monotonic() - self.since)
        sd_notify("STATUS=running")
        self.since = None
