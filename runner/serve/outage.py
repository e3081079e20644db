"""serve while its store cannot answer: a transient ``StoreFault`` (``StoreUnavailable``:
PostgreSQL restarting, the network down, a lock held past the timeout, SQLite's too; a full
disk, a read-only file system, an I/O error). The loop keeps going and tries again instead of
exiting: every second for the first ``BACKOFF_AFTER_S``, then at doubling intervals up to
``MAX_RETRY_S``. Logged when the outage starts, every 30 s while it lasts and when it ends; the
status systemd shows says so; one alert (``Notice``) once it has lasted ``ALERT_AFTER_S`` (a
PostgreSQL restart of a second or two is no alert). Nothing fires meanwhile: every tick needs
the store, and a fire whose transaction failed is due again at the next tick (catch-up applies
to a long outage). A damaged file (``StoreDamaged``) is not ridden out: serve stops, naming it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from runner.serve.notify import sd_notify
from runner.store import StoreFault

RETRY_S = 1.0
MAX_RETRY_S = 8.0
BACKOFF_AFTER_S = 10.0  # retries every RETRY_S for this long, then back off
REPEAT_S = 30.0
ALERT_AFTER_S = 10.0


class StoreOutage:
    def __init__(self, log: logging.Logger, alert: Callable[[StoreFault, float], None] | None = None):
        """``alert(exc, seconds)``: called once per outage, once it has lasted ``ALERT_AFTER_S``."""
        self.log = log
        self.alert = alert
        self.since: float | None = None  # monotonic start of the current outage
        self._logged = 0.0
        self._alerted = False
        self._delay = RETRY_S

    @property
    def ongoing(self) -> bool:
        return self.since is not None

    @property
    def retry_s(self) -> float:
        """How long the loop waits before it tries the store again."""
        return self._delay

    def failed(self, exc: StoreFault, began: float | None = None) -> None:
        """The round that started at ``began`` (monotonic; default now) failed with ``exc``: a
        statement that waited out busy_timeout started its outage when it began waiting."""
        now = time.monotonic()
        if self.since is None:
            self.since = min(began, now) if began is not None else now
            self._logged = now
            self.log.error("the store cannot answer: %s; nothing fires until it does (retrying)", exc)
            sd_notify("STATUS=store unavailable; retrying")
        elif now - self._logged >= REPEAT_S:
            self._logged = now
            self.log.error("the store still cannot answer after %.0f s: %s", now - self.since, exc)
        lasted = now - self.since
        if lasted >= BACKOFF_AFTER_S:
            self._delay = min(MAX_RETRY_S, self._delay * 2)
        if not self._alerted and lasted >= ALERT_AFTER_S and self.alert is not None:
            self._alerted = True
            try:
                self.alert(exc, lasted)
            except Exception as err:  # noqa: BLE001 - an alert that cannot be queued must not stop serve
                self.log.error("cannot send the store alert: %s", err)

    def answered(self) -> None:
        if self.since is None:
            return
        self.log.warning("the store answers again after %.1f s; firing resumes", time.monotonic() - self.since)
        sd_notify("STATUS=running")
        self.since = None
        self._alerted = False
        self._delay = RETRY_S
