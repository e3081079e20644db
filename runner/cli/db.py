"""``runner db backup | migrate | reindex``: the store file itself."""

from __future__ import annotations

from pathlib import Path

import click

from runner.cli._util import settings


@click.group("db")
def db_group() -> None:
    """The store (RUNNER_HOME/runner.db): back it up, apply its migrations, rebuild its search index."""


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
    source = s.home / "runner.db"
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
    from runner.store import Store

    s = settings()
    s.ensure_home()
    store = Store.open(s.home / "runner.db", migrate=False, state=s.state_dirs)
    try:
        with store.guard():
            applied = store.migrate()
    finally:
        store.close()
    for name in applied:
        click.echo(f"applied {name}")
    if not applied:
        click.echo(f"{store.path}: up to date")


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
