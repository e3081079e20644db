"""The same migrations make the same schema on SQLite and PostgreSQL: tables, columns (names, in
order, and their kind: text, integer, real, bytes), primary keys, unique indexes and foreign keys (column,
referenced table and column, ON DELETE). The full-text index's own tables differ by design (FTS5
virtual table vs a table with a tsvector column). One key is kept differently: ``runs.task_id``
(TEXT) -> ``tasks(id)`` is a FOREIGN KEY on SQLite and, as PostgreSQL refuses a key between TEXT
and BIGINT, a constraint trigger there (m0019); it counts as that key when the trigger exists
(its behaviour is in tests/store/test_contract.py)."""

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


#: pg_constraint.confdeltype -> SQLite's ON DELETE words
ON_DELETE = {"a": "NO ACTION", "r": "RESTRICT", "c": "CASCADE", "n": "SET NULL", "d": "SET DEFAULT"}


def _trigger_keys(conn: object, table: str) -> set[tuple[str, str, str, str]]:
    """The keys PostgreSQL keeps with a constraint trigger (m0019's ``runs.task_id``)."""
    from runner.store.migrations import m0019_runs_task_key as m0019

    found = conn.execute(  # type: ignore[attr-defined]
        "SELECT 1 FROM pg_trigger WHERE tgrelid = ?::regclass AND tgname = ? AND tgconstraint <> 0",
        (table, m0019.TRIGGER),
    ).fetchone()
    return {m0019.KEY} if found else set()


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
        keys = {(r[3], r[2], r[4], r[6].upper()) for r in store.conn.execute(f'PRAGMA foreign_key_list("{table}")')}
        out[table] = {
            "columns": [(r[1], KINDS[r[2].upper()]) for r in info],
            "pk": pk,
            "unique": unique,
            "foreign": keys,
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
        foreign = conn.execute(
            "SELECT a.attname, f.relname, fa.attname, c.confdeltype FROM pg_constraint c "
            "JOIN pg_class f ON f.oid = c.confrelid "
            "JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1] "
            "JOIN pg_attribute fa ON fa.attrelid = c.confrelid AND fa.attnum = c.confkey[1] "
            "WHERE c.contype = 'f' AND c.conrelid = ?::regclass",
            (table,),
        ).fetchall()
        out[table] = {
            "columns": [(r[0], KINDS[r[1]]) for r in cols],
            "pk": tuple(r[0] for r in pk),
            "unique": {(r[0], tuple(r[1])) for r in unique},
            "foreign": {(r[0], r[1], r[2], ON_DELETE[r[3]]) for r in foreign} | _trigger_keys(conn, table),
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
    assert ("task_id", "tasks", "id", "SET NULL") in a["runs"]["foreign"] and b["runs"]["foreign"] == a["runs"][
        "foreign"
    ]
    assert ("run_id", "runs", "id", "CASCADE") in b["run_events"]["foreign"]
    assert lite.applied_migrations() == pg.applied_migrations()
    lite.close()
    pg.close()


def test_search_removal_triggers_plan_once_on_postgresql(pg_empty_url):
    """m0031: the search index's removal triggers keep one generic plan on PostgreSQL (planned per
    value, a pruned run's id made every row's plan walk the index's deleted entries)."""
    from runner.store.migrations import m0031_search_removal_plans as m0031

    pg = Store.open(PgURL(pg_empty_url))
    rows = pg.conn.execute(
        "SELECT proname, proconfig FROM pg_proc WHERE proname IN (?, ?)", m0031.FUNCTIONS
    ).fetchall()
    pg.close()
    assert {r[0]: r[1] for r in rows} == {name: ["plan_cache_mode=force_generic_plan"] for name in m0031.FUNCTIONS}
