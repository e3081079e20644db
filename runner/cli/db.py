"""``runner db backup | migrate | copy | reindex``: the store itself."""

from __future__ import annotations

from pathlib import Path

import click

from runner.cli._util import settings


@click.group("db")
def db_group() -> None:
    """The store (RUNNER_HOME/runner.db, or the database: of config.yaml): back it up, apply its
    migrations, copy it to another database, rebuild its search index."""


@db_group.command("backup")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--force", is_flag=True, help="overwrite PATH if it exists")
def db_backup(path: Path, force: bool) -> None:
    """Copy the store to PATH (mode 0600) with SQLite's online backup API, while serve and runs
    keep writing; the copy is checked with PRAGMA quick_check. Refuses an existing PATH unless
    --force. Restore: stop serve, then put the copy in place of runner.db (and remove
    runner.db-wal and runner.db-shm)."""
    from runner.errors import UsageError
    from runner.store import Store
    from runner.store.backup import backup, check_destination

    s = settings()
    if s.database.path is None:
        raise UsageError(f"{s.database.shown}: a PostgreSQL store is backed up with pg_dump, not runner db backup")
    source = s.database.path
    if not source.exists():
        raise UsageError(f"{source}: no store to back up")
    check_destination(path.absolute(), force=force)  # before opening anything
    store = Store.open(source, migrate=False, state=s.state_dirs)
    try:
        done = backup(store, path, force=force)
    finally:
        store.close()
    click.echo(f"backed up {source} to {done.path} ({done.pages} pages, {done.size:,} bytes)")


@db_group.command("migrate")
def db_migrate() -> None:
    """Apply the store's pending schema migrations and print each one applied (every command
    also applies them when it opens the store; this does only that)."""
    s = settings()
    s.ensure_home()
    store = s.open_store(migrate=False)
    try:
        with store.guard():
            applied = store.migrate()
    finally:
        store.close()
    for name in applied:
        click.echo(f"applied {name}")
    if not applied:
        click.echo(f"{store.shown}: up to date")


@db_group.command("copy")
@click.argument("source")
@click.argument("target")
def db_copy(source: str, target: str) -> None:
    """Copy a whole store to another database: SOURCE and TARGET are sqlite:///PATH or
    postgresql://user@host/name. Both are migrated first; the TARGET must be empty. Every table
    is copied in dependency order in one transaction on the TARGET, checked by row counts
    before it commits (a failure leaves the TARGET as it was). Stop serve and workers first.
    Then point database: (config.yaml) or RUNNER_DATABASE_URL at the TARGET."""
    from runner.errors import UsageError
    from runner.store import Store
    from runner.store.copy import copy_store
    from runner.store.dialect import parse

    src, dst = parse(source, what="SOURCE"), parse(target, what="TARGET")
    if src.path is not None and not src.path.exists():
        raise UsageError(f"{src.shown}: no store there (SOURCE)")
    if src.shown == dst.shown:
        raise UsageError(f"{src.shown}: SOURCE and TARGET are the same store")
    src_store = Store.open(src)
    try:
        dst_store = Store.open(dst)
        try:
            done = copy_store(src_store, dst_store)
        finally:
            dst_store.close()
    finally:
        src_store.close()
    click.echo(f"copied {src.shown} to {dst.shown} ({sum(n for _, n in done.tables):,} rows):")
    for table, n in done.tables:
        click.echo(f"  {table}: {n}")
    click.echo(f"  (search index: {done.indexed} texts)")


@db_group.command("reindex")
def db_reindex() -> None:
    """Rebuild the full-text index of past runs (`runner runs search`, the session_search tool)
    from the ledger's events and the runs' output files, in one transaction: searches keep
    using the old index until the new one is complete. Runs keep the index current by
    themselves; this is for an index that was lost, or after restoring outputs."""
    from runner.store.search import rebuild

    done = rebuild(settings().store)
    click.echo(f"indexed {done.events} event texts and {done.outputs} outputs")


COMMANDS = [db_group]
