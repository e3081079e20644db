"""The PostgreSQL store: a thin connection adapter over psycopg 3 with the sqlite3 shape the rest
of runner codes against (``conn.execute(sql, params)`` returning a cursor with ``fetchone``,
``fetchall``, ``rowcount``, ``lastrowid``; rows indexable by position and name; ``in_transaction``).

Only imported when ``database:`` names PostgreSQL: SQLite users never load psycopg.

What the adapter translates (each statement once, cached per connection):

- placeholders: ``?`` -> ``%s``, ``:name`` -> ``%(name)s`` (``%`` in the text doubled);
- ``INSERT OR IGNORE`` -> ``INSERT ... ON CONFLICT DO NOTHING``; ``INSERT OR REPLACE`` ->
  ``ON CONFLICT (primary key) DO UPDATE`` of the other columns named;
- ``json_extract(col, '$.key')`` -> ``(col::jsonb ->> 'key')``; ``INDEXED BY`` hints dropped;
- ``BEGIN IMMEDIATE`` -> ``BEGIN`` + ``pg_advisory_xact_lock(STORE_LOCK)``: one writer at a time
  across every machine, the semantics each read-then-write transaction was written for; a
  plain ``BEGIN`` (``store.transaction(lock=False)``) is for writers that lock their own rows
  (kanban: ``FOR UPDATE SKIP LOCKED``);
- ``PRAGMA data_version`` -> the server's WAL position (changes whenever anyone commits);
  other PRAGMAs are no-ops;
- an INSERT into a table with an identity ``id`` gets ``RETURNING id`` for ``lastrowid``.

Parameters are sent untyped (like SQLite's loose columns, the server infers each from where it
stands: an int compared with a TEXT column is text); ``numeric`` results (``SUM`` of integers)
come back as int. Errors keep the sqlite3 classes callers catch: a unique violation is a
``sqlite3.IntegrityError``; a lost server, a lock waited on past ``LOCK_TIMEOUT_S`` or a
connection refused is a ``StoreFault`` naming the database (password hidden). A broken
connection is replaced on the next statement outside a transaction.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

import psycopg
from psycopg.adapt import Dumper, Loader
from psycopg.pq import TransactionStatus

from runner.errors import StoreStateError
from runner.store import Store, StoreUnavailable
from runner.store.dialect import STORE_LOCK, Dialect, PgURL, redact_url

#: held (session level) while migrations are applied, so two first opens do not race ('RMIG')
MIGRATE_LOCK = 0x524D4947
LOCK_TIMEOUT_S = 30
CONNECT_TIMEOUT_S = 10
OPTIONS = {
    "connect_timeout": CONNECT_TIMEOUT_S,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "application_name": "runner",
}


# -- values ---------------------------------------------------------------------------------
class _Untyped(Dumper):
    """A number sent as text of unknown type: the server reads it as the column or operand wants."""

    oid = 0

    def dump(self, obj: Any) -> bytes:
        return str(obj).encode()


class _UntypedBool(Dumper):
    oid = 0

    def dump(self, obj: Any) -> bytes:
        return b"1" if obj else b"0"


class _Number(Loader):
    """``numeric`` (what SUM of a bigint column is) as int when whole, else float."""

    def load(self, data: Any) -> Any:
        text = bytes(data).decode()
        try:
            return int(text)
        except ValueError:
            return float(text)


class Row:
    """A result row like ``sqlite3.Row``: by position, by column name, ``keys()``, unpacking."""

    __slots__ = ("_values", "_index")

    def __init__(self, values: Sequence[Any], index: Mapping[str, int]):
        self._values, self._index = values, index

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return self._values[self._index[key]]
        return self._values[key]

    def keys(self) -> list[str]:
        return list(self._index)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __eq__(self, other: object) -> bool:
        return tuple(self._values) == (tuple(other) if isinstance(other, Row | tuple) else other)

    def __hash__(self) -> int:
        return hash(tuple(self._values))

    def __repr__(self) -> str:
        return f"Row({dict(zip(self._index, self._values, strict=False))!r})"


def _rows(cursor: Any) -> Any:
    desc = cursor.description
    index: dict[str, int] = {}
    for i, column in enumerate(desc or ()):
        index.setdefault(column.name, i)  # the first of two equal names, as sqlite3.Row does
    return lambda values: Row(values, index)


# -- statements -----------------------------------------------------------------------------
_TOKENS = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|\?|(?<![:\w]):([A-Za-z_]\w*)|%|::")
_OR_IGNORE = re.compile(r"^\s*INSERT\s+OR\s+IGNORE\s+INTO\b", re.IGNORECASE)
_OR_REPLACE = re.compile(r"^\s*INSERT\s+OR\s+REPLACE\s+INTO\s+(\w+)\s*\(([^)]*)\)", re.IGNORECASE)
_INDEXED_BY = re.compile(r"\s+INDEXED\s+BY\s+\w+", re.IGNORECASE)
_JSON_EXTRACT = re.compile(r"json_extract\(\s*([\w.]+)\s*,\s*'\$\.(\w+)'\s*\)", re.IGNORECASE)
_INSERT_VALUES = re.compile(r"^\s*INSERT\s+INTO\s+(\w+)\b.*\bVALUES\b", re.IGNORECASE | re.DOTALL)


def _placeholders(sql: str) -> str:
    def swap(m: re.Match[str]) -> str:
        text = m.group(0)
        if text == "?":
            return "%s"
        if text == "%":
            return "%%"
        if m.group(1):
            return f"%({m.group(1)})s"
        return text

    return _TOKENS.sub(swap, sql)


@lru_cache(maxsize=4096)
def translate(sql: str) -> str:
    """The PostgreSQL text of one statement as runner's code writes it for SQLite (see the module doc)."""
    out = _INDEXED_BY.sub("", sql)
    out = _JSON_EXTRACT.sub(lambda m: f"({m.group(1)}::jsonb ->> '{m.group(2)}')", out)
    if _OR_IGNORE.match(out):
        out = _OR_IGNORE.sub("INSERT INTO", out, count=1).rstrip().rstrip(";") + " ON CONFLICT DO NOTHING"
    return _placeholders(out)


class PgCursor:
    """What ``conn.execute`` returns: the sqlite3 cursor's reading side."""

    __slots__ = ("_cur", "lastrowid", "_first")

    def __init__(self, cur: Any, lastrowid: int | None = None, first: Any = None):
        self._cur, self.lastrowid, self._first = cur, lastrowid, first

    @property
    def rowcount(self) -> int:
        return int(self._cur.rowcount) if self._cur is not None else -1

    @property
    def description(self) -> Any:
        return self._cur.description if self._cur is not None else None

    def fetchone(self) -> Any:
        if self._cur is None or self._cur.description is None:
            return None
        return self._cur.fetchone()

    def fetchmany(self, size: int = 1) -> list[Any]:
        if self._cur is None or self._cur.description is None:
            return []
        return list(self._cur.fetchmany(size))

    def fetchall(self) -> list[Any]:
        if self._cur is None or self._cur.description is None:
            return []
        return list(self._cur.fetchall())

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())


_EMPTY = PgCursor(None)


class PgConnection:
    """One psycopg connection (autocommit; transactions are the statements ``BEGIN`` ... ``COMMIT``
    the store sends, as with sqlite3's ``isolation_level=None``), reconnected when broken."""

    def __init__(self, url: str):
        self.url = url
        self.shown = redact_url(url)
        self._raw: psycopg.Connection[Any] | None = None
        self._keys: dict[str, tuple[str, ...]] | None = None  # table -> primary key columns
        self._identity: frozenset[str] | None = None  # tables with an identity ``id``
        self._began = False  # inside a BEGIN the store sent (a broken connection's status is unknown)
        self._texts: dict[tuple[str, bool], tuple[str, bool]] = {}  # statement -> its PostgreSQL text
        self._raw = self._open()

    # -- connection ---------------------------------------------------------------------
    def _open(self) -> psycopg.Connection[Any]:
        try:
            raw = psycopg.connect(self.url, autocommit=True, row_factory=_rows, **OPTIONS)  # type: ignore[arg-type]
        except psycopg.OperationalError as exc:
            raise StoreUnavailable(f"{self.shown}: cannot connect to the store: {_first_line(exc)}") from exc
        except psycopg.Error as exc:
            raise StoreStateError(f"{self.shown}: cannot open the store: {_first_line(exc)}") from exc
        for kind in (int, float):
            raw.adapters.register_dumper(kind, _Untyped)
        raw.adapters.register_dumper(bool, _UntypedBool)
        raw.adapters.register_loader("numeric", _Number)
        raw.execute(f"SET lock_timeout = '{LOCK_TIMEOUT_S}s'")
        return raw

    @property
    def raw(self) -> psycopg.Connection[Any]:
        raw = self._raw
        if raw is None or raw.closed or raw.broken:
            if raw is not None and not raw.closed:
                raw.close()
            self._began = False  # what was begun on the dead connection is gone with it
            self._raw = raw = self._open()
        return raw

    @property
    def in_transaction(self) -> bool:
        raw = self._raw
        if raw is None or raw.closed or raw.broken:
            return False
        return raw.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR)

    def close(self) -> None:
        if self._raw is not None:
            self._raw.close()

    def forget_schema(self) -> None:
        """Read the primary keys and identity columns again (after a migration)."""
        self._keys = self._identity = None
        self._texts.clear()

    # -- statements ---------------------------------------------------------------------
    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> PgCursor:
        head = sql.lstrip()[:24].upper()
        if head.startswith("PRAGMA"):
            return self._pragma(sql)
        if head.startswith("BEGIN IMMEDIATE"):
            with self._errors():
                raw = self.raw
                raw.execute("BEGIN")
                self._began = True
                raw.execute("SELECT pg_advisory_xact_lock(%s)", (STORE_LOCK,))
            return _EMPTY
        if head.startswith(("BEGIN", "COMMIT", "ROLLBACK")):
            self._began = head.startswith("BEGIN")
            with self._errors():
                self.raw.execute(sql)
            return _EMPTY
        text, returning = self._text(sql)
        with self._errors():
            try:
                cur = self.raw.execute(text, params or None)
            except psycopg.OperationalError:
                if not self._stale():
                    raise
                cur = self.raw.execute(text, params or None)  # on a new connection
            if returning:
                row = cur.fetchone()
                return PgCursor(cur, int(row[0]) if row else None)
            return PgCursor(cur)

    def _stale(self) -> bool:
        """The statement failed because the connection was dead before it was sent (the server
        restarted while it sat idle): true outside a transaction, so it is sent once more on a
        new connection. Inside a transaction the work is lost: the caller gets the StoreFault."""
        raw = self._raw
        if raw is None or not raw.broken or self._began:
            return False
        raw.close()
        return True

    def executemany(self, sql: str, seq: Iterable[Sequence[Any] | Mapping[str, Any]]) -> PgCursor:
        text, _ = self._text(sql, returning=False)
        with self._errors():
            cur = self.raw.cursor()
            cur.executemany(text, list(seq))
            return PgCursor(cur)

    def executescript(self, script: str) -> None:
        with self._errors():
            self.raw.execute(script)

    def _text(self, sql: str, *, returning: bool = True) -> tuple[str, bool]:
        key = (sql, returning)
        known = self._texts.get(key)
        if known is None:
            known = self._texts[key] = self._make_text(sql, returning=returning)
        return known

    def _make_text(self, sql: str, *, returning: bool) -> tuple[str, bool]:
        text = translate(sql)
        if _OR_REPLACE.match(sql):
            text = self._replace(sql)
        m = _INSERT_VALUES.match(text)
        if returning and m and m.group(1) in self._identity_tables() and "RETURNING" not in text.upper():
            return text + " RETURNING id", True
        return text, False

    def _replace(self, sql: str) -> str:
        m = _OR_REPLACE.match(sql)
        assert m is not None
        table, columns = m.group(1), [c.strip().strip('"') for c in m.group(2).split(",")]
        keys = self._primary_keys().get(table)
        if not keys:
            raise sqlite3.OperationalError(f"INSERT OR REPLACE into {table}: no primary key known")
        updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in columns if c not in keys)
        body = _OR_REPLACE.sub(f"INSERT INTO {table} ({m.group(2)})", sql, count=1).rstrip().rstrip(";")
        tail = f"DO UPDATE SET {updates}" if updates else "DO NOTHING"
        return translate(f"{body} ON CONFLICT ({', '.join(keys)}) {tail}")

    def _pragma(self, sql: str) -> PgCursor:
        if "data_version" in sql.lower():
            with self._errors():
                return PgCursor(self.raw.execute("SELECT pg_current_wal_lsn()::text AS data_version"))
        return _EMPTY  # journal mode, checkpoints, busy timeout: SQLite's file; nothing to do here

    def _primary_keys(self) -> dict[str, tuple[str, ...]]:
        if self._keys is None:
            rows = self.raw.execute(
                "SELECT tc.table_name, kcu.column_name FROM information_schema.table_constraints tc "
                "JOIN information_schema.key_column_usage kcu ON kcu.constraint_name = tc.constraint_name "
                "AND kcu.table_schema = tc.table_schema WHERE tc.constraint_type = 'PRIMARY KEY' "
                "AND tc.table_schema = current_schema() ORDER BY tc.table_name, kcu.ordinal_position"
            ).fetchall()
            keys: dict[str, tuple[str, ...]] = {}
            for table, column in rows:
                keys[table] = (*keys.get(table, ()), column)
            self._keys = keys
        return self._keys

    def _identity_tables(self) -> frozenset[str]:
        if self._identity is None:
            rows = self.raw.execute(
                "SELECT table_name FROM information_schema.columns WHERE table_schema = current_schema() "
                "AND column_name = 'id' AND is_identity = 'YES'"
            ).fetchall()
            self._identity = frozenset(r[0] for r in rows)
        return self._identity

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except psycopg.Error as exc:
            raise translate_error(exc, self.shown) from exc


def translate_error(exc: psycopg.Error, shown: str) -> Exception:
    """A psycopg error as the sqlite3 class runner's code catches (a fault of the server: StoreFault)."""
    text = _first_line(exc)
    if isinstance(exc, psycopg.errors.IntegrityError):
        return sqlite3.IntegrityError(text)
    if isinstance(exc, psycopg.errors.LockNotAvailable | psycopg.errors.QueryCanceled):
        return StoreUnavailable(f"{shown}: store busy: {text} (another process held the store's lock)")
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return StoreUnavailable(f"{shown}: store error: {text}")
    if isinstance(exc, psycopg.errors.ProgrammingError | psycopg.errors.DataError):
        return sqlite3.OperationalError(text)
    return sqlite3.DatabaseError(text)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


# -- the store ------------------------------------------------------------------------------
class PgStore(Store):
    """A ``Store`` whose connections are ``PgConnection`` s to ``url`` (``path`` is the URL)."""

    dialect = Dialect.POSTGRESQL
    ROW_BEGIN = "BEGIN"

    @classmethod
    def open_url(cls, url: str, *, migrate: bool = True) -> PgStore:
        address = PgURL(url)
        store = cls(address, PgConnection(address))  # type: ignore[arg-type]
        if migrate:
            store.migrate()
        return store

    def _new_connection(self) -> Any:
        return PgConnection(str(self.path))

    @property
    def shown(self) -> str:
        return redact_url(str(self.path))

    def migrate(self) -> list[str]:
        from runner.store.pg_schema import install_functions

        conn = self._conn
        assert isinstance(conn, PgConnection)
        with conn._errors():
            conn.raw.execute("SELECT pg_advisory_lock(%s)", (MIGRATE_LOCK,))
        try:
            install_functions(conn)
            done = super().migrate()
        finally:
            with conn._errors():
                conn.raw.execute("SELECT pg_advisory_unlock(%s)", (MIGRATE_LOCK,))
        if done:
            for other in (conn, *self._others):
                other.forget_schema()
        return done

    def _settle_auto_vacuum(self) -> None:
        return None  # PostgreSQL's autovacuum returns space by itself

    def migration_db(self) -> Any:
        from runner.store.pg_schema import PgMigrationDB

        conn = self._conn
        assert isinstance(conn, PgConnection)
        return PgMigrationDB(conn)

    def quick_check(self) -> list[str]:
        """The server checks its own pages; here: it answers and holds runner's tables."""
        try:
            self.conn.execute("SELECT count(*) FROM _migrations").fetchone()
        except sqlite3.DatabaseError as exc:
            return [str(exc)]
        return []
