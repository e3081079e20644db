"""Leading the schedule: ``LeaseTicker`` keeps serve's scheduler lease (``runner.store.lease``),
renewed every third of ``serve.lease_s``, and at once after the store failed to answer (the
lease's connection may have died with it: a PostgreSQL restart). When a renewal finds another
holder (this serve was paused or cut off longer than the lease, or a standby took the lease while
our connection was down), serve steps down at once, before any other ticker fires a slot, and
stands by (``Serve.run``): there is always one leader, never none.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from runner.store import StoreUnavailable
from runner.store.lease import Lease


class LeaseTicker:
    name = "lease"

    def __init__(self, lease: Lease, ttl: float, log: logging.Logger, on_lost: Callable[[], None]):
        self.lease, self.every, self.log, self.on_lost = lease, ttl / 3, log, on_lost
        self._next: datetime | None = None

    def tick(self, now: datetime) -> None:
        if self._next is not None and now < self._next:
            return
        try:
            kept = self.lease.renew()  # the wall clock: leases are compared across machines
        except StoreUnavailable:
            self._next = None  # renew first when the store answers again
            raise
        if not kept:
            self.log.error("another serve holds the scheduler lease now; this one stops scheduling")
            self.on_lost()
            return
        self._next = now + timedelta(seconds=self.every)

    def recheck(self) -> None:
        """Renew at the next tick (the store failed to answer: our lease may be gone)."""
        self._next = None

    def next_wake(self, now: datetime) -> datetime | None:
        return self._next

    def close(self) -> None:
        return None
