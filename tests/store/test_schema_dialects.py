"""The same migrations make the same schema on SQLite and PostgreSQL: tables, columns (names, in
order, and their kind: text, integer, real, bytes), primary keys and unique indexes. The full-text
index's own tables differ by design (FTS5 virtual table vs a table with a tsvector column)."""

from __future__ import annotations

from runner.store import Store
from runner.store.dialect import PgURL

KINDS = {
    "TEXT": "text",
    "INTEGER": "integer",
    "BIGINT": "integer",
    "FLOAT": "real",
    "REAL": "real",
    "DOUBLE PRECISION": "real",
    "BLOB": "bytes",
    "BYTEA": "bytes",
}
DIALECT_SPECIFIC = ("search_fts",)


def sqlite_schema(store: Store) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    names = [
        r[0]
        for r in store.conn.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")
        if not r[0].startswith(DIALECT_SPECIFIC)
    ]
    for table in names:
        info = list(store.conn.execute(f'PRAGMA table_info("{table}")'))
        pk = tuple(r[1] for r in sorted((r for r in info if r[5]), key=lambda r: r[5]))
        unique = set()
        for idx in store.conn.execute(f'PRAGMA index_list("{table}")'):
            if idx[2] and idx[3] == "c":  # unique, made by CREATE UNIQUE INDEX
                cols = tuple(r[2] for r in store.conn.execute(f'PRAGMA index_info("{idx[1]}")'))
                unique.add((idx[1], cols))
        out[table] = {
            "columns": [(r[1], KINDS[r[2].upper()]) for r in info],
            "pk": pk,
            "unique": unique,
        }
    return out


def pg_schema(store: Store) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    conn = store.conn
    names = [
        r[0]
        for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() "
            "AND table_type = 'BASE TABLE'"
        )
        if not r[0].startswith(DIALECT_SPECIFIC)
    ]
    for table in names:
        cols = conn.execute(
            "SELECT column_name, upper(data_type) FROM information_schema.columns WHERE table_schema = "
            "current_schema() AND table_name = ? ORDER BY ordinal_position",
            (table,),
        ).fetchall()
        pk = conn.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = ?::regclass AND i.indisprimary "
            "ORDER BY array_position(i.indkey, a.attnum)",
            (table,),
        ).fetchall()
        unique = conn.execute(
            "SELECT c.relname, array_agg(a.attname ORDER BY array_position(i.indkey, a.attnum)) FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = ?::regclass AND i.indisunique AND NOT i.indisprimary "
            "GROUP BY c.relname",
            (table,),
        ).fetchall()
        out[table] = {
            "columns": [(r[0], KINDS[r[1]]) for r in cols],
            "pk": tuple(r[0] for r in pk),
            "unique": {(r[0], tuple(r[1])) for r in unique},
        }
    return out


def test_the_same_tables_columns_keys_and_unique_indexes(tmp_path, pg_empty_url):
    lite = Store.open(tmp_path / "runner.db")
    pg = Store.open(PgURL(pg_empty_url))
    a, b = sqlite_schema(lite), pg_schema(pg)
    assert sorted(a) == sorted(b)
    for table in a:
        assert a[table] == b[table], table
    assert b["runs"]["unique"] == {("runs_job_slot", ("job", "slot", "attempt"))}
    assert lite.applied_migrations() == pg.applied_migrations()
    lite.close()
    pg.close()
