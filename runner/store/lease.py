"""Named leases in the store: one holder at a time, for ``ttl`` seconds unless renewed.

serve leads the schedule only while it holds the ``scheduler`` lease; a standby serve waits for it
(docs/distributed.md). On SQLite a lease is a row of ``leases`` written under ``BEGIN IMMEDIATE``:
taken when absent, expired or already this holder's, renewed by its holder, released at a clean
stop. The row also says who leads (host, pid), which ``runner jobs list`` shows.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from runner.clock import iso, parse_iso, utcnow
from runner.store import Store

SCHEDULER = "scheduler"


@dataclass(frozen=True)
class LeaseHolder:
    """Who holds a lease (as the store says) and until when."""

    name: str
    holder: str
    host: str
    pid: int
    acquired_at: str
    expires_at: str

    def live(self, now: datetime | None = None) -> bool:
        expires = parse_iso(self.expires_at)
        return expires is not None and expires > (now or utcnow())


class Lease(Protocol):
    """A lease one process tries to take and keep (``SqliteLease``; PostgreSQL keeps the same seam)."""

    name: str
    holder: str

    def acquire(self, now: datetime | None = None) -> bool:
        """Take the lease if it is free or expired (or already ours, which renews it)."""
        ...

    def renew(self, now: datetime | None = None) -> bool:
        """Extend our lease; False when someone else holds it now (we lost it)."""
        ...

    def release(self) -> None: ...


def holder_id() -> str:
    """``host:pid``: unique among the processes taking a lease."""
    return f"{socket.gethostname()}:{os.getpid()}"


class SqliteLease:
    """The lease as a ``leases`` row with an expiry, written in one ``BEGIN IMMEDIATE``."""

    def __init__(self, store: Store, name: str, ttl: float, holder: str | None = None):
        self.store, self.name, self.ttl = store, name, ttl
        self.holder = holder or holder_id()

    def acquire(self, now: datetime | None = None) -> bool:
        now = now or utcnow()
        expires = iso(now + timedelta(seconds=self.ttl))
        with self.store.transaction() as conn:
            row = conn.execute("SELECT holder, expires_at FROM leases WHERE name=?", (self.name,)).fetchone()
            if row is not None and row[0] != self.holder and (parse_iso(row[1]) or now) > now:
                return False
            conn.execute(
                "INSERT INTO leases (name, holder, host, pid, acquired_at, renewed_at, expires_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET holder=excluded.holder, "
                "host=excluded.host, pid=excluded.pid, acquired_at=CASE WHEN leases.holder=excluded.holder "
                "THEN leases.acquired_at ELSE excluded.acquired_at END, renewed_at=excluded.renewed_at, "
                "expires_at=excluded.expires_at",
                (self.name, self.holder, socket.gethostname(), os.getpid(), iso(now), iso(now), expires),
            )
        return True

    def renew(self, now: datetime | None = None) -> bool:
        now = now or utcnow()
        with self.store.transaction() as conn:
            cur = conn.execute(
                "UPDATE leases SET renewed_at=?, expires_at=? WHERE name=? AND holder=?",
                (iso(now), iso(now + timedelta(seconds=self.ttl)), self.name, self.holder),
            )
        return cur.rowcount == 1

    def release(self) -> None:
        with self.store.transaction() as conn:
            conn.execute("DELETE FROM leases WHERE name=? AND holder=?", (self.name, self.holder))


def lease_holder(store: Store, name: str = SCHEDULER) -> LeaseHolder | None:
    """The lease's row (None before any serve took it, or after a clean stop)."""
    row = store.one("SELECT * FROM leases WHERE name=?", (name,))
    if row is None:
        return None
    return LeaseHolder(row["name"], row["holder"], row["host"], int(row["pid"]), row["acquired_at"], row["expires_at"])


def open_lease(store: Store, name: str, ttl: float) -> Lease:
    """The lease for this store's dialect."""
    return SqliteLease(store, name, ttl)
