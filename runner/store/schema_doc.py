"""The schema of a store as Markdown (docs/store.md's generated part, kept fresh by a test)."""

from __future__ import annotations

from runner.store import Store


def render(store: Store) -> str:
    """Every table of ``store`` (not SQLite's own, not FTS shadow tables): its columns, keys and indexes."""
    tables = [
        r["name"]
        for r in store.query(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
        )
    ]
    return "\n".join(_table(store, name) for name in tables)


def _table(store: Store, name: str) -> str:
    cols = store.query(f'PRAGMA table_info("{name}")')
    fks = {r["from"]: r for r in store.query(f'PRAGMA foreign_key_list("{name}")')}
    lines = [f"### `{name}`", "", "| column | type | null | default | key |", "|---|---|---|---|---|"]
    for c in cols:
        key = "pk" if c["pk"] else ""
        if c["name"] in fks:
            fk = fks[c["name"]]
            key = (key + " " if key else "") + f"-> {fk['table']}.{fk['to']} ({fk['on_delete'].lower()})"
        default = "" if c["dflt_value"] is None else f"`{c['dflt_value']}`"
        lines.append(f"| {c['name']} | {c['type'] or ''} | {'no' if c['notnull'] else 'yes'} | {default} | {key} |")
    indexes = store.query(
        "SELECT name, sql FROM sqlite_master WHERE type='index' AND tbl_name=? AND sql IS NOT NULL ORDER BY name",
        (name,),
    )
    if indexes:
        lines += ["", "Indexes: " + ", ".join(f"`{i['name']}`" for i in indexes) + "."]
    return "\n".join(lines) + "\n"


def render_fresh() -> str:
    """The schema of a new store (what every migration builds), for cog."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(Path(tmp) / "runner.db")
        try:
            return render(store)
        finally:
            store.close()
