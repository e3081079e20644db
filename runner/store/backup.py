"""``runner db backup``: a consistent copy of the store with SQLite's online backup API.

The copy is taken while other processes keep writing (a WAL reader sees one snapshot), written
to a temporary file beside the destination with mode 0600, checked with ``PRAGMA quick_check``,
then renamed into place: the destination is either the old file or a whole, sound copy.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from runner.errors import StoreError, UsageError
from runner.store import Store, fault


@dataclass(frozen=True)
class Backup:
    path: Path
    pages: int
    size: int


def check_destination(dest: Path, *, force: bool) -> None:
    """Refuse a destination that exists (unless ``force``), is a folder, or has no parent folder."""
    if dest.is_dir():
        raise UsageError(f"{dest}: is a folder; give the backup's file name")
    if dest.exists() and not force:
        raise UsageError(f"{dest}: already exists; pass --force to overwrite it")
    if not dest.parent.is_dir():
        raise UsageError(f"{dest.parent}: no such folder")


def backup(store: Store, dest: Path, *, force: bool = False) -> Backup:
    """Copy ``store`` to ``dest`` (see the module doc); UsageError for a bad destination (exit 2),
    StoreError when writing the copy fails (disk full, read-only folder) or the copy is unsound."""
    dest = dest.absolute()
    check_destination(dest, force=force)
    tmp = dest.with_name(f".{dest.name}.tmp{os.getpid()}")
    try:
        pages = _copy(store, tmp)
        os.replace(tmp, dest)
    except OSError as exc:
        raise StoreError(f"{dest}: cannot write the backup: {exc.strerror or exc}") from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()  # left only when the copy failed
    return Backup(dest, pages, dest.stat().st_size)


def _copy(store: Store, tmp: Path) -> int:
    """Back ``store`` up into the new file ``tmp`` (0600) as one self-contained file; return its pages."""
    os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    target = sqlite3.connect(tmp, isolation_level=None)
    try:
        try:
            store.conn.backup(target)
            target.execute("PRAGMA journal_mode=DELETE")  # no -wal beside the copy: one file to keep
            pages = int(target.execute("PRAGMA page_count").fetchone()[0])
        except sqlite3.DatabaseError as exc:
            raise (fault(tmp, exc) or StoreError(f"{tmp}: backup failed: {exc}")) from exc
        problems = Store(tmp, target).quick_check()  # the copy's pages are the store's, byte for byte
    finally:
        target.close()
    if problems:
        raise StoreError(
            f"{store.path}: the copy fails quick_check ({problems[0]}): the store itself is damaged; "
            "restore an earlier backup, or move the file aside"
        )
    with open(tmp, "rb+") as fh:
        os.fsync(fh.fileno())
    return pages
