"""The SQLite store: one file, WAL, busy_timeout, numbered migrations applied on open.

Hot paths use the plain ``sqlite3`` connection; sqlite-utils is used for schema changes in
migrations (it pulls in numpy when present, which costs a quarter second, so it is only
imported when a migration is actually pending). Every write that first reads goes through
``store.transaction()``, which is ``BEGIN IMMEDIATE``.

The same ``Store`` API runs on PostgreSQL (``database:`` / ``RUNNER_DATABASE_URL``): ``Store.open``
of a ``PgURL`` gives a ``runner.store.pg.PgStore`` (psycopg 3, imported only then); ``store.dialect``
says which one a caller has (docs/postgresql.md).
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from runner.clock import iso, utcnow
from runner.errors import StoreError, StoreStateError
from runner.store.dialect import Dialect, PgURL, Target

BUSY_TIMEOUT_MS = 30_000
MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def migration_names() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules([str(MIGRATIONS_DIR)]) if m.name.startswith("m"))


#: SQLite primary result codes that are faults of the file or the disk (not contention, not a
#: constraint): a statement failing with one raises ``StoreFault`` naming the file
FAULTS = {3: "permission", 8: "readonly", 10: "ioerr", 11: "corrupt", 13: "full", 14: "cantopen", 26: "notadb"}
BUSY = {5, 6}  # SQLITE_BUSY, SQLITE_LOCKED: another process holds the lock past busy_timeout
BROKEN = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB: the file itself is damaged
WHAT_TO_DO = "restore a backup (made with `runner db backup PATH`) or move the file aside to start a new ledger"


class StoreFault(StoreError, sqlite3.OperationalError):
    """A statement failed because of the file or the disk (full, I/O error, corrupt page, read-only).
    Also a ``sqlite3.OperationalError``, so loops that carry on after a database error still do."""

    reason = "store_error"
    #: the fault may pass by itself (space freed, the lock released, the file system remounted):
    #: serve rides it out (``runner.serve.outage``); False for a damaged file, which will not heal
    transient = True


class StoreUnavailable(StoreFault):
    """The store cannot answer now: its server unreachable, restarting, a connection it dropped,
    or busy past the lock timeout (PostgreSQL's, or SQLite's busy_timeout: another process held
    the write lock). Transient: serve waits and tries again."""

    reason = "store_error"  # recorded on a run as any other store fault


class StoreDamaged(StoreFault):
    """The file itself is damaged (a corrupt page, not a database): not transient."""

    reason = "store_error"  # recorded on a run as any other store fault
    transient = False


def sqlite_code(exc: sqlite3.Error) -> int | None:
    """The primary SQLite result code of ``exc`` (None for errors raised by the sqlite3 module itself)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def fault(path: Path, exc: sqlite3.Error) -> StoreFault | None:
    """``exc`` as a ``StoreFault`` naming ``path`` (``StoreUnavailable`` for a lock held past
    busy_timeout, ``StoreDamaged`` for a damaged file), or None when it is neither a fault of the
    file or disk nor contention."""
    code = sqlite_code(exc)
    if code in BUSY:
        return StoreUnavailable(f"{path}: store busy: {exc} (another process held the write lock past busy_timeout)")
    if code not in FAULTS:
        return None
    if code in BROKEN:
        return StoreDamaged(f"{path}: store error: {exc}; run `runner doctor`, then {WHAT_TO_DO}")
    return StoreFault(f"{path}: store error: {exc}")


def transient(exc: BaseException) -> bool:
    """``exc`` is worth trying again soon: the store's server cannot answer now (``StoreUnavailable``:
    a restart, a dropped connection, a lock timeout) or another process held SQLite's write lock
    past busy_timeout."""
    if isinstance(exc, StoreUnavailable):
        return True
    return isinstance(exc, sqlite3.OperationalError) and not isinstance(exc, StoreFault) and sqlite_code(exc) in BUSY


class Store:
    """The store; ``conn`` is the connection of the calling thread: the thread that opened the
    store uses the one it opened, any other thread (a subagent, a parallel tool call) gets its
    own on first use, so transactions of two threads never share a connection.

    ``dialect``: SQLite here; ``runner.store.pg.PgStore`` is the PostgreSQL form (``path`` is then
    its URL, a ``PgURL``), opened by the same ``Store.open``."""

    dialect = Dialect.SQLITE
    #: what ``transaction(lock=False)`` begins with: on SQLite every writer takes the one lock
    ROW_BEGIN = "BEGIN IMMEDIATE"

    def __init__(self, path: Path, conn: sqlite3.Connection):
        self.path = path
        self._conn = conn
        self._owner = threading.get_ident()
        self._local = threading.local()
        self._others: list[sqlite3.Connection] = []  # other threads' connections, closed with the store

    @property
    def conn(self) -> sqlite3.Connection:
        if threading.get_ident() == self._owner:
            return self._conn
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            with self.guard():
                conn = self._local.conn = self._new_connection()
            self._others.append(conn)
        return conn

    def _new_connection(self) -> sqlite3.Connection:
        return _connect(self.path)

    @property
    def shown(self) -> str:
        """Where the store is, for messages (a PostgreSQL URL without its password)."""
        return str(self.path)

    @classmethod
    def open(cls, path: Path | PgURL | Target, *, migrate: bool = True, state: Sequence[Path] = ()) -> Store:
        """Open (or create) the store at ``path`` (a SQLite file, a ``PgURL``, or a ``Target``).
        ``state``: folders whose files show that runs happened here (RUNNER_HOME's outputs and
        transcripts): next to them an empty SQLite ledger is refused (StoreStateError, exit 2)
        instead of silently starting over."""
        if isinstance(path, Target):
            path = path.url if path.url is not None else Path(path.path or "")
        if isinstance(path, PgURL):
            from runner.store.pg import PgStore

            return PgStore.open_url(path, migrate=migrate)
        path = Path(path)
        empty = _empty_file(path)  # a missing file is a new ledger (also after moving the old one aside)
        if empty and path.exists():
            _refuse_fresh(path, state, "the file is empty")
        conn = _connect(path)
        store = cls(path, conn)
        if not empty:
            _check_schema(store, state)
        if migrate:
            with store.guard():
                store.migrate()
        for suffix in ("-wal", "-shm"):
            side = Path(f"{path}{suffix}")
            if side.exists():
                os.chmod(side, 0o600)
        return store

    @contextmanager
    def guard(self) -> Iterator[None]:
        """Turn a fault of the file or the disk inside the block into a ``StoreFault`` naming the file."""
        try:
            yield
        except StoreError:
            raise
        except sqlite3.DatabaseError as exc:
            converted = fault(self.path, exc)
            if converted is None:
                raise
            raise converted from exc

    def close(self) -> None:
        self.close_others()
        self._conn.close()

    def close_others(self) -> None:
        """Close the connections other threads opened (their threads are done with the store; one
        that uses it again opens a new one)."""
        for conn in self._others:
            conn.close()
        self._others.clear()
        self._local = threading.local()

    # -- migrations ---------------------------------------------------------------------
    def applied_migrations(self) -> set[str]:
        self.conn.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
        return {row[0] for row in self.conn.execute("SELECT name FROM _migrations")}

    def migrate(self) -> list[str]:
        """Apply pending migrations in name order; return the names applied."""
        pending = [n for n in migration_names() if n not in self.applied_migrations()]
        if not pending:
            return []
        db = self.migration_db()
        done: list[str] = []
        # the documented way to rebuild a table: foreign keys off (a pragma outside a transaction),
        # checked with foreign_key_check before each migration commits (PostgreSQL: no-ops there)
        self.conn.execute("PRAGMA foreign_keys=OFF")
        try:
            for name in pending:
                module = importlib.import_module(f"runner.store.migrations.{name}")
                with self.transaction():
                    if self.conn.execute("SELECT 1 FROM _migrations WHERE name=?", (name,)).fetchone():
                        continue  # another process applied it meanwhile
                    getattr(module, f"apply_{self.dialect.value}", module.apply)(db)
                    _check_foreign_keys(self.conn, name)
                    self.conn.execute("INSERT INTO _migrations VALUES (?, ?)", (name, iso(utcnow())))
                done.append(name)
        finally:
            self.conn.execute("PRAGMA foreign_keys=ON")
        self._settle_auto_vacuum()
        return done

    def migration_db(self) -> Any:
        """What a migration's ``apply(db)`` gets: a sqlite-utils ``Database`` (PostgreSQL: a
        ``runner.store.pg_schema.PgMigrationDB`` with the same few methods)."""
        import sqlite_utils

        return sqlite_utils.Database(self.conn)

    def _settle_auto_vacuum(self) -> None:
        """``auto_vacuum`` set on an existing file takes effect at the next VACUUM (m0015 sets it to
        INCREMENTAL so pruning can give space back): run that VACUUM once, outside any transaction."""
        mode = self.conn.execute("PRAGMA auto_vacuum").fetchone()[0]
        if mode != 2 and "m0015_foreign_keys" in self.applied_migrations():
            self.conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
            self.conn.execute("VACUUM")

    # -- access -------------------------------------------------------------------------
    @contextmanager
    def transaction(self, *, lock: bool = True) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` (re-entrant: nested use joins the outer one). On
        PostgreSQL the same takes the store-wide advisory lock; ``lock=False`` begins without it,
        for a writer that locks the rows it changes itself (``SELECT ... FOR UPDATE``)."""
        depth = getattr(self._local, "depth", 0)
        if depth:
            self._local.depth = depth + 1
            try:
                yield self.conn
            finally:
                self._local.depth = depth
            return
        with self.guard():
            self.conn.execute("BEGIN IMMEDIATE" if lock else self.ROW_BEGIN)
            self._local.depth = 1
            try:
                yield self.conn
                self.conn.execute("COMMIT")  # may fail too (disk full while writing the WAL)
            except BaseException:
                if self.conn.in_transaction:  # SQLite may have rolled back by itself (SQLITE_FULL, IOERR)
                    self.conn.execute("ROLLBACK")
                raise
            finally:
                self._local.depth = 0

    # plain try/except rather than ``guard()``: these are on the hot path (an event per tool call)
    def query(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        try:
            return [dict(row) for row in self.conn.execute(sql, params)]
        except sqlite3.DatabaseError as exc:
            raise (fault(self.path, exc) or exc) from exc

    def one(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> dict[str, Any] | None:
        try:
            row = self.conn.execute(sql, params).fetchone()
        except sqlite3.DatabaseError as exc:
            raise (fault(self.path, exc) or exc) from exc
        return dict(row) if row is not None else None

    def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> sqlite3.Cursor:
        try:
            return self.conn.execute(sql, params)
        except sqlite3.DatabaseError as exc:
            raise (fault(self.path, exc) or exc) from exc

    def quick_check(self) -> list[str]:
        """``PRAGMA quick_check``: the problems found (empty when the file is sound). A page so
        damaged that the check itself cannot read it is reported as that error."""
        try:
            rows = [str(r[0]) for r in self.conn.execute("PRAGMA quick_check")]
        except sqlite3.DatabaseError as exc:
            if sqlite_code(exc) not in FAULTS:
                raise
            return [str(exc)]
        return [] if rows == ["ok"] else rows


def _check_foreign_keys(conn: sqlite3.Connection, migration: str) -> None:
    """A migration must leave every foreign key satisfied (they were off while it ran)."""
    bad = conn.execute("PRAGMA foreign_key_check").fetchmany(3)
    if bad:
        shown = ", ".join(f"{r[0]} rowid {r[1]} -> {r[2]}" for r in bad)
        raise StoreError(f"migration {migration} left rows pointing at missing parents: {shown}")


def _empty_file(path: Path) -> bool:
    """``path`` is missing or has no bytes (a new store, or one truncated to nothing)."""
    try:
        return path.stat().st_size == 0
    except FileNotFoundError:
        return True
    except OSError as exc:
        raise StoreStateError(f"{path}: cannot read the store: {exc.strerror or exc}") from exc


def _earlier_runs(state: Sequence[Path]) -> Path | None:
    """The first of the ``state`` folders that holds a file (so runs happened here), else None."""
    for folder in state:
        try:
            if any(entry for entry in Path(folder).rglob("*") if entry.is_file()):
                return Path(folder)
        except OSError:
            continue  # a folder we cannot read proves nothing either way
    return None


def _refuse_fresh(path: Path, state: Sequence[Path], what: str) -> None:
    """An empty ledger is fine in a new RUNNER_HOME; next to earlier runs it means the old one was lost."""
    found = _earlier_runs(state)
    if found is not None:
        raise StoreStateError(f"{path}: {what} but {found} holds earlier runs; {WHAT_TO_DO}")


def _connect(path: Path) -> sqlite3.Connection:
    """Create the file (0600) if needed, connect and set the pragmas; a file that is not a usable
    database is a StoreStateError (exit 2), a lock held too long a StoreFault (exit 1)."""
    try:
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        if path.stat().st_size == 0:  # a new file: pruning gives space back (PRAGMA incremental_vacuum)
            conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
        # WAL is a property of the file: set once, by whoever opens it first. Asking again on every
        # open took a lock that a busy machine's many openers (a burst, a fleet of workers) met as
        # "database is locked" at start
        if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
            conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
    except OSError as exc:
        raise StoreStateError(f"{path}: cannot create the store: {exc.strerror or exc}") from exc
    except sqlite3.Error as exc:
        if sqlite_code(exc) in BUSY:
            raise StoreFault(f"{path}: cannot open the store: {exc}") from exc
        hint = f"; {WHAT_TO_DO}" if sqlite_code(exc) in BROKEN else ""
        raise StoreStateError(f"{path}: cannot open the store: {exc}{hint}") from exc
    return conn


def _check_schema(store: Store, state: Sequence[Path]) -> None:
    """A non-empty file must be runner's ledger (it has ``_migrations``), or hold no tables at all
    (another process is creating it right now), which is refused only next to earlier runs."""
    try:
        tables = {r[0] for r in store.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.DatabaseError as exc:
        store.close()
        hint = f"; {WHAT_TO_DO}" if sqlite_code(exc) in BROKEN else ""
        raise StoreStateError(f"{store.path}: cannot read the store: {exc}{hint}") from exc
    if "_migrations" in tables:
        return
    if tables:
        store.close()
        raise StoreStateError(
            f"{store.path}: not runner's ledger (no _migrations table; tables: {', '.join(sorted(tables)[:5])}); "
            "give runner its own RUNNER_HOME, or move the file aside"
        )
    try:
        _refuse_fresh(store.path, state, "the store holds no tables")
    except StoreStateError:
        store.close()
        raise


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))
