"""Notebooks in the store: read one, change one in a single ``BEGIN IMMEDIATE`` transaction
(read, modify, write: concurrent writers from any number of processes lose nothing), list, clear."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from runner.clock import iso, utcnow
from runner.errors import RunnerError
from runner.memory.notebook import Notebook, Scope
from runner.store import Store


class NotebookChanged(RunnerError, RuntimeError):
    """The notebook was written by someone else since it was read (``runner memory edit``)."""

    reason = "notebookchanged"


@dataclass(frozen=True)
class Stored:
    scope: str
    notebook: Notebook
    version: int  # 0: never written
    updated_at: str | None = None
    updated_by: str | None = None


def load(store: Store, scope: Scope) -> Stored:
    row = store.one("SELECT * FROM memory_notebooks WHERE scope=?", (scope.key,))
    if row is None:
        return Stored(scope.key, Notebook(), 0)
    return _stored(row)


def _stored(row: dict[str, object]) -> Stored:
    entries = tuple(str(e) for e in json.loads(str(row["entries"])))
    return Stored(
        str(row["scope"]),
        Notebook(entries),
        int(str(row["version"])),
        str(row["updated_at"]) if row["updated_at"] else None,
        str(row["updated_by"]) if row["updated_by"] else None,
    )


def change(
    store: Store, scope: Scope, edit: Callable[[Notebook], Notebook], *, by: str, expect_version: int | None = None
) -> tuple[Notebook, Notebook]:
    """Apply ``edit`` to the stored notebook and save the result, all in one transaction; return
    (before, after). ``edit`` raising (``MemoryRefused``) leaves the row as it was. With
    ``expect_version``, a row written since that version raises ``NotebookChanged``."""
    with store.transaction() as conn:
        row = conn.execute("SELECT * FROM memory_notebooks WHERE scope=?", (scope.key,)).fetchone()
        current = _stored(dict(row)) if row is not None else Stored(scope.key, Notebook(), 0)
        if expect_version is not None and current.version != expect_version:
            raise NotebookChanged(
                f"{scope}: the notebook changed while it was being edited (by {current.updated_by}); "
                "nothing was saved: run the edit again"
            )
        after = edit(current.notebook)
        if after.entries != current.notebook.entries:
            conn.execute(
                "INSERT INTO memory_notebooks (scope, entries, chars, version, updated_at, updated_by) "
                "VALUES (?, ?, ?, 1, ?, ?) ON CONFLICT(scope) DO UPDATE SET entries=excluded.entries, "
                "chars=excluded.chars, version=memory_notebooks.version + 1, updated_at=excluded.updated_at, "
                "updated_by=excluded.updated_by",
                (scope.key, json.dumps(list(after.entries), ensure_ascii=False), after.chars, iso(utcnow()), by),
            )
    return current.notebook, after


def all_notebooks(store: Store) -> list[Stored]:
    return [_stored(r) for r in store.query("SELECT * FROM memory_notebooks ORDER BY scope")]


def clear(store: Store, scope: Scope, *, by: str) -> int:
    """Empty the notebook; return how many entries it held."""
    before, _ = change(store, scope, lambda nb: Notebook((), nb.cap), by=by)
    return len(before.entries)
