"""Named leases in the store: one holder at a time, for ``ttl`` seconds unless renewed.

serve leads the schedule only while it holds the ``scheduler`` lease; a standby serve waits for it
(docs/distributed.md). On SQLite a lease is a row of ``leases`` written under ``BEGIN IMMEDIATE``:
taken when absent, expired or already this holder's, renewed by its holder, released at a clean
stop. On PostgreSQL (``PgLease``) holding the lease is holding a session-level advisory lock on a
connection of its own, and the row is written on that connection only while it holds the lock:
the server frees the lock the moment the holder's connection dies, and a session that took the
lock but could not write its row closes (gives the lock back) before it calls itself the leader.
A holder that finds the row naming someone else while it holds the lock writes it again (logged).
A holder that stopped renewing (paused, cut off) past its row's expiry has its session ended by
the next taker, found in ``pg_locks`` and named by its holder id (``application_name``). A leader
whose connection died with the server (a PostgreSQL restart) takes the lock again at its next
renewal unless a standby got it first, and then stands by itself; while the server cannot
answer, the renewal raises ``StoreUnavailable`` and serve waits. The row says who leads (host,
pid, since when), which ``runner jobs list`` and ``/metrics`` show.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import zlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from runner.clock import iso, parse_iso, utcnow
from runner.store import Store, StoreUnavailable
from runner.store.dialect import Dialect

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

    def describe(self, now: datetime | None = None) -> str:
        """``leader: HOST (pid N) since 07:29:31 UTC (5m ago)``, or, when its lease ran out and
        nobody took it, ``no leader: ...``."""
        now = now or utcnow()
        since, expires = parse_iso(self.acquired_at), parse_iso(self.expires_at)
        if self.live(now) and since is not None:
            return f"leader: {self.host} (pid {self.pid}) since {since:%H:%M:%S} UTC ({_ago(now - since)} ago)"
        ran_out = f"{_ago(now - expires)} ago" if expires is not None else "at an unknown time"
        return f"no leader: the scheduler lease of {self.host} (pid {self.pid}) ran out {ran_out}"


def _ago(delta: timedelta) -> str:
    seconds = max(0, int(delta.total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


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
# this session holds the advisory lock whose key halves are the two parameters
HOLDS = (
    "EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid() "
    "AND classid::bigint = ? AND objid::bigint = ? AND objsubid = 1)"
)
ORPHAN_GRACE = 1.0  # x ttl: a lock held that long with no row at all is evicted


def lease_app_name(holder: str) -> str:
    """The ``application_name`` of the connection holding a lease (``pg_stat_activity`` shows it):
    how a taker finds the holder to evict by its holder id."""
    return f"runner lease {holder}"[:63]


class PgLease:
    """The lease as a session-level advisory lock held by a dedicated connection, and the row,
    written on that same connection and only while it holds the lock (``_write_row``): a row names
    a holder only as long as that holder's session has the lock, and a session that took the lock
    but could not write its row gives the lock back (it closes) before anyone is told it leads."""

    def __init__(
        self, store: Store, name: str, ttl: float, holder: str | None = None, log: logging.Logger | None = None
    ):
        self.store, self.name, self.ttl = store, name, ttl
        self.holder = holder or holder_id()
        self.log = log or logging.getLogger(__name__)
        self.key = LOCK_SPACE + zlib.crc32(name.encode())
        self._conn: Any = None
        self._held = False
        self._lapsed = False  # held until our connection died; not yet taken again
        self._backend: int | None = None  # the server process of our connection (it holds the lock)
        self._orphan_since: float | None = None  # monotonic: the lock seen held with no live row

    def _execute(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        """One statement (``?`` placeholders) on the lease's own connection, through
        ``PgConnection``: a connection found dead when used (the server restarted while it sat
        idle) is opened again and the statement sent once more; a server that cannot answer is a
        ``StoreUnavailable``. Statements that must run where the lock is say so (``HOLDS``): a
        reconnected session holds nothing."""
        if self._conn is None:
            from runner.store.pg import PgConnection

            self._conn = PgConnection(str(self.store.path))
        return self._conn.execute(sql, params)

    def _drop(self) -> None:
        """Close our connection (the server frees a lock it held) and forget the lock."""
        conn, self._conn = self._conn, None
        self._held, self._backend = False, None
        if conn is not None:
            try:
                conn.close()
            except Exception as exc:  # noqa: BLE001 - closing a dead connection; nothing to keep
                self.log.debug("closing the %s lease connection: %s", self.name, exc)

    def _still_held(self) -> bool:
        """Whether our session still holds the advisory lock (False when the connection died: a
        new one holds nothing)."""
        try:
            return bool(self._execute(f"SELECT {HOLDS}", self._lock_id()).fetchone()[0])
        except StoreUnavailable as exc:  # the server is down: the lock went with our connection
            self.log.warning("the %s lease's connection failed (%s): its lock is gone with it", self.name, exc)
            return False

    def _lock_id(self) -> tuple[int, int]:
        """The two 32-bit halves ``pg_locks`` shows an advisory lock's bigint key as."""
        return (self.key >> 32, self.key & 0xFFFFFFFF)

    def acquire(self, now: datetime | None = None) -> bool:
        now = now or utcnow()
        if self._held:
            return self.renew(now)
        return self._take(now)

    def _take(self, now: datetime) -> bool:
        """Take the lock (evicting a holder that stopped renewing past its row's expiry) and write
        the row naming us on the same session; on any failure after the lock, drop the session."""
        got = self._try_lock()
        if not got and self._evict_stale(now):
            got = self._try_lock()
        if not got:
            return False
        try:
            written = self._write_row(now, taken=True)
        except BaseException:
            self._drop()  # the lock goes with the session: nobody leads on a lock without its row
            raise
        if not written:  # our session changed under the statement: the lock is not ours
            self._drop()
            return False
        self._held, self._orphan_since = True, None
        return True

    def _try_lock(self) -> bool:
        """``pg_try_advisory_lock`` on our session, named after our holder id; ``_backend``: the
        session that now holds it."""
        row = self._execute(
            "SELECT pg_try_advisory_lock(?), pg_backend_pid(), set_config('application_name', ?, false)",
            (self.key, lease_app_name(self.holder)),
        ).fetchone()
        if not row[0]:
            return False
        self._backend = int(row[1])
        return True

    def _write_row(self, now: datetime, *, taken: bool) -> bool:
        """Upsert the row naming us, only on the session holding the lock (False: this statement
        ran on another session, so the lock is not ours). ``taken``: a new term (acquired_at now)."""
        cur = self._execute(
            "INSERT INTO leases (name, holder, host, pid, acquired_at, renewed_at, expires_at, backend) "
            f"SELECT ?, ?, ?, CAST(? AS INTEGER), ?, ?, ?, CAST(? AS INTEGER) WHERE {HOLDS} "
            "ON CONFLICT(name) DO UPDATE SET holder=excluded.holder, host=excluded.host, pid=excluded.pid, "
            "acquired_at=CASE WHEN ? OR leases.holder <> excluded.holder THEN excluded.acquired_at "
            "ELSE leases.acquired_at END, renewed_at=excluded.renewed_at, expires_at=excluded.expires_at, "
            "backend=excluded.backend",
            (
                self.name,
                self.holder,
                socket.gethostname(),
                os.getpid(),
                iso(now),
                iso(now),
                iso(now + timedelta(seconds=self.ttl)),
                self._backend,
                *self._lock_id(),
                taken,
            ),
        )
        return bool(cur.rowcount == 1)

    def _lock_holders(self) -> list[tuple[int, str]]:
        """The sessions holding our advisory lock now (pid, application_name)."""
        rows = self._execute(
            "SELECT l.pid, COALESCE(a.application_name, '') FROM pg_locks l "
            "LEFT JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted "
            "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND l.classid::bigint = ? AND l.objid::bigint = ? AND l.objsubid = 1",
            self._lock_id(),
        ).fetchall()
        return [(int(r[0]), str(r[1])) for r in rows]

    def _evict_stale(self, now: datetime) -> bool:
        """The lock is held but nobody renews the row (its holder is paused or cut off past the
        row's expiry, or the session holding the lock never wrote one for a whole ttl): end the
        session holding the lock (found in ``pg_locks``; its ``application_name`` names its holder
        id), which frees the lock. A live row is never overridden: its holder is renewing it. True
        when the lock may be free now (a holder was ended, waiting up to 2 s for it to be gone, or
        nobody holds it any more)."""
        holders = self._lock_holders()
        if not holders:
            return True  # released between our try and this look
        row = self._execute("SELECT holder, expires_at FROM leases WHERE name=?", (self.name,)).fetchone()
        expires = parse_iso(row[1]) if row is not None else None
        if row is not None and (expires is None or expires > now):
            self._orphan_since = None
            return False  # someone renews it (a holder whose row is stale repairs it at its renewal)
        if row is None:  # the lock's holder has no row (yet): give it a ttl to write one
            since = self._orphan_since = self._orphan_since or time.monotonic()
            if time.monotonic() - since < self.ttl * ORPHAN_GRACE:
                return False
        ended = False
        for pid, app in holders:
            named = row is not None and app == lease_app_name(row[0])
            self.log.warning(
                "ending %s (server pid %d): it holds the %s lock but %s",
                app or "a session",
                pid,
                self.name,
                f"its lease ran out at {row[1]}"
                if named
                else f"wrote no lease row (the row names {row[0] if row is not None else 'nobody'})",
            )
            ended = bool(self._execute("SELECT pg_terminate_backend(?, 2000)", (pid,)).fetchone()[0]) or ended
        self._orphan_since = None
        return ended

    def renew(self, now: datetime | None = None) -> bool:
        now = now or utcnow()
        if not self._held and not self._lapsed:
            return False
        if self._lapsed or not self._still_held():
            # our connection is gone (the server restarted, the network dropped it) and the lock
            # with it: take it again unless another serve took it meanwhile (then it leads and we
            # stand by). While the server is down this raises StoreUnavailable; the next renewal
            # tries again.
            self._drop()
            self._lapsed = True
            taken = self._take(now)
            self._lapsed = False
            if taken:
                self.log.warning("took the %s lease again on a new connection to the store", self.name)
            else:
                self.log.warning("the %s lease was taken by another holder while our connection was down", self.name)
            return taken
        cur = self._execute(
            f"UPDATE leases SET renewed_at=?, expires_at=? WHERE name=? AND holder=? AND {HOLDS}",
            (iso(now), iso(now + timedelta(seconds=self.ttl)), self.name, self.holder, *self._lock_id()),
        )
        if cur.rowcount == 1:
            return True
        # we hold the lock but the row does not name us (a taker before us lost its session
        # between the lock and the row, an older serve wrote it): the lock is the truth, repair it
        row = self._execute("SELECT holder FROM leases WHERE name=?", (self.name,)).fetchone()
        self.log.warning(
            "the %s lease's row names %s although this process holds its lock: writing it again",
            self.name,
            row[0] if row is not None else "nobody",
        )
        if self._write_row(now, taken=False):
            return True
        self._lapsed = True  # the statement ran on another session: take it again next time
        return False

    def release(self) -> None:
        self._lapsed = False
        if self._held and self._conn is not None and self._still_held():
            self._execute(
                f"DELETE FROM leases WHERE name=? AND holder=? AND {HOLDS}",
                (self.name, self.holder, *self._lock_id()),
            )
            # unlock before closing: closing alone frees the lock only once the server has
            # processed the disconnect, which a taker right after us could beat
            self._execute("SELECT pg_advisory_unlock(?)", (self.key,))
        self._drop()


def open_lease(
    store: Store, name: str, ttl: float, holder: str | None = None, log: logging.Logger | None = None
) -> Lease:
    """The lease for this store's dialect (``holder``: default ``host:pid``; ``log``: where a
    PostgreSQL lease says it repaired its row, took its lock again or ended a stale holder)."""

    if store.dialect is Dialect.POSTGRESQL:
        return PgLease(store, name, ttl, holder, log)
    return SqliteLease(store, name, ttl, holder)
