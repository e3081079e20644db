"""Named leases in the store: one holder at a time, for ``ttl`` seconds unless renewed.

serve leads the schedule only while it holds the ``scheduler`` lease; a standby serve waits for it
(docs/distributed.md). On SQLite a lease is a row of ``leases`` written under ``BEGIN IMMEDIATE``:
taken when absent, expired or already this holder's, renewed by its holder, released at a clean
stop. On PostgreSQL (``PgLease``) holding the lease is holding a session-level advisory lock on a
connection of its own: the server frees it the moment the holder's connection dies; a holder that
stopped renewing (paused, cut off) past its expiry has that connection terminated by the next
taker. A leader whose connection died with the server (a PostgreSQL restart) takes the lock
again at its next renewal unless a standby got it first; while the server cannot answer, the
renewal raises ``StoreUnavailable`` and serve waits. The row is kept on both for display: who
leads (host, pid), which ``runner jobs list`` shows.
"""

from __future__ import annotations

import os
import socket
import zlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

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


LOCK_SPACE = 0x52554E00  # "RUN\0": advisory lock keys of leases (a name's CRC-32 added)


class PgLease:
    """The lease as a session-level advisory lock held by a dedicated connection, plus the row."""

    def __init__(self, store: Store, name: str, ttl: float, holder: str | None = None):
        self.store, self.name, self.ttl = store, name, ttl
        self.holder = holder or holder_id()
        self.key = LOCK_SPACE + zlib.crc32(name.encode())
        self._conn: Any = None
        self._held = False
        self._lapsed = False  # held until our connection died; not yet taken again
        self._backend: int | None = None  # the server process of our connection (it holds the lock)

    def _raw(self) -> Any:
        if self._conn is None:
            from runner.store.pg import PgConnection

            self._conn = PgConnection(str(self.store.path))
        return self._conn.raw  # reconnects a broken connection (whose lock the server freed)

    def _one(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        """The first value of one statement (``?`` placeholders) on the lease's own connection,
        through ``PgConnection``: a connection found dead when used (the server restarted while it
        sat idle) is opened again and the statement sent once more; a server that cannot answer
        is a ``StoreUnavailable``."""
        self._raw()
        return self._conn.execute(sql, params).fetchone()[0]

    def _still_held(self) -> bool:
        """Whether our connection, and so our advisory lock, is still there."""
        raw = self._conn.raw if self._conn is not None else None
        try:
            return (
                raw is not None
                and not raw.broken
                and raw.execute("SELECT pg_backend_pid()").fetchone()[0] == self._backend
            )
        except Exception:  # noqa: BLE001 - any failure of the connection means the lock is gone
            return False

    def acquire(self, now: datetime | None = None) -> bool:
        now = now or utcnow()
        if self._held:
            return self.renew(now)
        if not self._try_lock() and not (self._evict_stale(now) and self._try_lock()):
            return False
        self._backend = int(self._one("SELECT pg_backend_pid()"))
        self._held = True
        with self.store.transaction() as conn:
            conn.execute(
                "INSERT INTO leases (name, holder, host, pid, acquired_at, renewed_at, expires_at, backend) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET holder=excluded.holder, "
                "host=excluded.host, pid=excluded.pid, acquired_at=excluded.acquired_at, "
                "renewed_at=excluded.renewed_at, expires_at=excluded.expires_at, backend=excluded.backend",
                (
                    self.name,
                    self.holder,
                    socket.gethostname(),
                    os.getpid(),
                    iso(now),
                    iso(now),
                    iso(now + timedelta(seconds=self.ttl)),
                    self._backend,
                ),
            )
        return True

    def _try_lock(self) -> bool:
        return bool(self._one("SELECT pg_try_advisory_lock(?)", (self.key,)))

    def _evict_stale(self, now: datetime) -> bool:
        """The holder stopped renewing past its expiry (paused, cut off): end its connection, which
        frees the lock. True when a holder was ended (waiting up to 2 s for it to be gone)."""
        row = self.store.one("SELECT backend, expires_at FROM leases WHERE name=?", (self.name,))
        expires = parse_iso(row["expires_at"]) if row else None
        if row is None or row["backend"] is None or expires is None or expires > now:
            return False
        return bool(self._one("SELECT pg_terminate_backend(?, 2000)", (int(row["backend"]),)))

    def renew(self, now: datetime | None = None) -> bool:
        now = now or utcnow()
        if not self._held and not self._lapsed:
            return False
        if self._lapsed or not self._still_held():
            # our connection is gone (the server restarted, the network dropped it) and the lock
            # with it: take it again unless another serve took it meanwhile. While the server is
            # down this raises StoreUnavailable, and the next renewal tries again.
            self._held, self._lapsed = False, True
            taken = self.acquire(now)
            self._lapsed = False
            return taken
        with self.store.transaction() as conn:
            cur = conn.execute(
                "UPDATE leases SET renewed_at=?, expires_at=? WHERE name=? AND holder=?",
                (iso(now), iso(now + timedelta(seconds=self.ttl)), self.name, self.holder),
            )
        return cur.rowcount == 1

    def release(self) -> None:
        if self._held:
            with self.store.transaction() as conn:
                conn.execute("DELETE FROM leases WHERE name=? AND holder=?", (self.name, self.holder))
        self._lapsed = False
        if self._conn is not None:
            if self._held and self._still_held():
                # unlock before closing: closing alone frees the lock only once the server has
                # processed the disconnect, which a taker right after us could beat
                self._conn.raw.execute("SELECT pg_advisory_unlock(%s)", (self.key,))
            self._conn.close()
            self._conn = None
        self._held = False


def open_lease(store: Store, name: str, ttl: float, holder: str | None = None) -> Lease:
    """The lease for this store's dialect (``holder``: default ``host:pid``)."""
    from runner.store.dialect import Dialect

    if store.dialect is Dialect.POSTGRESQL:
        return PgLease(store, name, ttl, holder)
    return SqliteLease(store, name, ttl, holder)
