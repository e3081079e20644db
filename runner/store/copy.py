"""``runner db copy SRC DST``: an installation's store copied to another database (SQLite to
PostgreSQL to move past one machine, or back), every table in dependency order, in one
transaction on the target, verified by row counts before it commits.

Both stores are migrated first (so they have the same schema). The target must be empty (its
migrations' own seed rows aside); anything else is refused before a row is written. The full-text
index is not copied row by row: the target's own triggers index the events as they arrive, and
each run's indexed output (seq 0) is added from the source's index, so ``search_docs`` ends with
the same count. Identity columns continue after the copied ids (PostgreSQL sequences are set).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from runner.errors import StoreError, UsageError
from runner.store import Store
from runner.store.dialect import Dialect
from runner.store.search import _add_output

BATCH = 1000
#: tables other tables point at (foreign keys), copied first, in this order
PARENTS = ("tasks", "runs")
#: the index (made again on the target from what is copied); ``_migrations`` is the target's own
NOT_COPIED = frozenset({"_migrations", "search_docs", "search_fts"})
#: rows a migration writes (m0006's curator_state row, m0020's skill_tree row): replaced by the source's
SEEDED = frozenset({"curator_state", "skill_tree"})


@dataclass(frozen=True)
class Copied:
    tables: tuple[tuple[str, int], ...]  # (table, rows) in copy order
    indexed: int  # search_docs rows on the target (events and outputs)


def tables(store: Store) -> list[str]:
    """The store's own tables (not SQLite's, not FTS5's shadow tables), sorted by name."""
    if store.dialect is Dialect.POSTGRESQL:
        sql = "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
    else:
        sql = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
    return sorted(str(r[0]) for r in store.conn.execute(sql) if not str(r[0]).startswith("search_fts"))


def columns(store: Store, table: str) -> list[str]:
    if store.dialect is Dialect.POSTGRESQL:
        rows = store.conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = ? AND is_generated = 'NEVER' ORDER BY ordinal_position",
            (table,),
        )
        return [str(r[0]) for r in rows]
    return [str(r[1]) for r in store.conn.execute(f'PRAGMA table_info("{table}")')]


def order(names: list[str]) -> list[str]:
    """Copy order: the parents first, then the rest by name (each points only at a parent)."""
    return [t for t in PARENTS if t in names] + [t for t in names if t not in PARENTS]


def count(store: Store, table: str) -> int:
    return int(store.conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])


def check_empty(target: Store) -> None:
    """Refuse a target that holds rows already (one line, exit 2)."""
    for table in tables(target):
        if table in NOT_COPIED or table in SEEDED:
            continue
        n = count(target, table)
        if n:
            raise UsageError(
                f"{target.shown}: the target is not empty ({table} has {n} rows); copy into a new, empty database"
            )


def copy_store(source: Store, target: Store) -> Copied:
    """Copy every table of ``source`` into the empty ``target`` (both migrated) in one transaction."""
    check_empty(target)
    theirs = set(tables(target))
    names = order([t for t in tables(source) if t not in NOT_COPIED])
    missing = [t for t in names if t not in theirs]
    if missing:
        raise StoreError(f"{target.shown}: no table {', '.join(missing)} (migrate both stores to one version)")
    done: list[tuple[str, int]] = []
    with target.transaction() as conn:
        for table in names:
            if table in SEEDED:
                conn.execute(f'DELETE FROM "{table}"')
            cols = [c for c in columns(source, table) if c in set(columns(target, table))]
            n = _copy_rows(source, conn, table, cols)
            done.append((table, n))
        _copy_outputs(source, conn)
        _verify(source, target, done)
        if target.dialect is Dialect.POSTGRESQL:
            _continue_identities(conn, names)
        indexed = count(target, "search_docs") if "search_docs" in theirs else 0
    return Copied(tuple(done), indexed)


def _rows(source: Store, table: str, cols: list[str]) -> Iterator[list[tuple[Any, ...]]]:
    quoted = ", ".join(f'"{c}"' for c in cols)
    cur = source.conn.execute(f'SELECT {quoted} FROM "{table}"')
    while True:
        batch = cur.fetchmany(BATCH)
        if not batch:
            return
        yield [tuple(r) for r in batch]


def _copy_rows(source: Store, conn: Any, table: str, cols: list[str]) -> int:
    quoted = ", ".join(f'"{c}"' for c in cols)
    marks = ", ".join("?" for _ in cols)
    n = 0
    for batch in _rows(source, table, cols):
        conn.executemany(f'INSERT INTO "{table}" ({quoted}) VALUES ({marks})', batch)
        n += len(batch)
    return n


def _copy_outputs(source: Store, conn: Any) -> None:
    """Each run's indexed output (seq 0 of the index; events the target's triggers indexed)."""

    rows = source.conn.execute(
        "SELECT d.run_id, d.job, d.ts, f.body FROM search_docs d JOIN search_fts f ON f.rowid = d.id "
        "WHERE d.seq = 0 ORDER BY d.id"
    ).fetchall()
    for run_id, job, ts, body in rows:
        _add_output(conn, run_id, job, ts, str(body))


def _verify(source: Store, target: Store, done: list[tuple[str, int]]) -> None:
    for table, n in done:
        theirs, ours = count(source, table), count(target, table)
        if not n == theirs == ours:
            raise StoreError(f"copy of {table}: {theirs} rows in the source, {ours} in the target; nothing was copied")


def _continue_identities(conn: Any, names: list[str]) -> None:
    """PostgreSQL: identity sequences continue after the highest id copied."""
    identity = {
        str(r[0])
        for r in conn.execute(
            "SELECT table_name FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND column_name = 'id' AND is_identity = 'YES'"
        )
    }
    for table in (t for t in names if t in identity):
        row = conn.execute("SELECT pg_get_serial_sequence(?, 'id')", (f'"{table}"',)).fetchone()
        if row is not None and row[0]:
            conn.execute(f'SELECT setval(?, (SELECT COALESCE(MAX(id), 0) + 1 FROM "{table}"), false)', (row[0],))
