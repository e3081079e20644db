"""The SQLite store: one file, WAL, busy_timeout, numbered migrations applied on open.

Hot paths use the plain ``sqlite3`` connection; sqlite-utils is used for schema changes in
migrations (it pulls in numpy when present, which costs a quarter second, so it is only
imported when a migration is actually pending). Every write that first reads goes through
``store.transaction()``, which is ``BEGIN IMMEDIATE``.
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
from runner.errors import StoreError

BUSY_TIMEOUT_MS = 30_000
MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def migration_names() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules([str(MIGRATIONS_DIR)]) if m.name.startswith("m"))


class Store:
    def __init__(self, path: Path, conn: sqlite3.Connection):
        self.path = path
        self.conn = conn
        self._local = threading.local()

    @classmethod
    def open(cls, path: Path, *, migrate: bool = True) -> Store:
        path = Path(path)
        try:
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
            conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error as exc:
            raise StoreError(f"{path}: cannot open the store: {exc}") from exc
        store = cls(path, conn)
        if migrate:
            store.migrate()
        for suffix in ("-wal", "-shm"):
            side = Path(f"{path}{suffix}")
            if side.exists():
                os.chmod(side, 0o600)
        return store

    def close(self) -> None:
        self.conn.close()

    # -- migrations ---------------------------------------------------------------------
    def applied_migrations(self) -> set[str]:
        self.conn.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
        return {row[0] for row in self.conn.execute("SELECT name FROM _migrations")}

    def migrate(self) -> list[str]:
        """Apply pending migrations in name order; return the names applied."""
        pending = [n for n in migration_names() if n not in self.applied_migrations()]
        if not pending:
            return []
        import sqlite_utils

        db = sqlite_utils.Database(self.conn)
        done: list[str] = []
        for name in pending:
            module = importlib.import_module(f"runner.store.migrations.{name}")
            with self.transaction():
                if self.conn.execute("SELECT 1 FROM _migrations WHERE name=?", (name,)).fetchone():
                    continue  # another process applied it meanwhile
                module.apply(db)
                self.conn.execute("INSERT INTO _migrations VALUES (?, ?)", (name, iso(utcnow())))
            done.append(name)
        return done

    # -- access -------------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` (re-entrant: nested use joins the outer one)."""
        depth = getattr(self._local, "depth", 0)
        if depth:
            self._local.depth = depth + 1
            try:
                yield self.conn
            finally:
                self._local.depth = depth
            return
        self.conn.execute("BEGIN IMMEDIATE")
        self._local.depth = 1
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        else:
            self.conn.execute("COMMIT")
        finally:
            self._local.depth = 0

    def query(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        return [dict(row) for row in self.conn.execute(sql, params)]

    def one(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> dict[str, Any] | None:
        row = self.conn.execute(sql, params).fetchone()
        return dict(row) if row is not None else None

    def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> sqlite3.Cursor:
        return self.conn.execute(sql, params)


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))
