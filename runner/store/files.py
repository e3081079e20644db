"""A run's output and transcript kept in the store as well as in RUNNER_HOME (``run_files``,
migration m0016), when the store is PostgreSQL: the files are on the machine that ran the run,
the store is shared, so ``runs show``, ``context_from``, alerts and ``db reindex`` on another
machine read the store's copy when the file is not there. On SQLite nothing is written here (the
store and the files are on one machine): that path is unchanged."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from runner.clock import iso, utcnow
from runner.store import Store
from runner.store.dialect import Dialect


class FileKind(StrEnum):
    OUTPUT = "output"
    TRANSCRIPT = "transcript"


def keep(store: Store, run_id: str, kind: FileKind, text: str) -> None:
    """Store ``text`` (already redacted) as the run's ``kind`` file, on PostgreSQL only."""
    if store.dialect is Dialect.SQLITE:
        return
    store.execute(
        "INSERT INTO run_files (run_id, kind, body, written_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (run_id, kind) DO UPDATE SET body = excluded.body, written_at = excluded.written_at",
        (run_id, kind, text, iso(utcnow())),
    )


def read(store: Store, run_id: str, kind: FileKind, path: str | Path | None) -> str:
    """The run's ``kind`` text: the file at ``path`` when this machine has it, else the store's
    copy; raises OSError (the file's) when neither exists."""
    try:
        if path is None:
            raise FileNotFoundError(f"run {run_id} has no {kind} file")
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        if store.dialect is Dialect.SQLITE:
            raise
        row = store.one("SELECT body FROM run_files WHERE run_id=? AND kind=?", (run_id, kind))
        if row is None:
            raise
        return str(row["body"])
