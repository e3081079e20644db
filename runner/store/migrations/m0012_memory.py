"""Memory notebooks (issue 18): one row per scope (``job:NAME`` or ``shared:NAME``), its entries
as a JSON list of strings, and a version bumped by every write (``runner memory edit`` refuses to
save over a write made while the editor was open)."""

from __future__ import annotations

from typing import Any


def apply(db: Any) -> None:
    db["memory_notebooks"].create(
        {
            "scope": str,  # job:NAME | shared:NAME
            "entries": str,  # JSON list of strings, in order
            "chars": int,  # characters of the entries joined by the delimiter (what the cap counts)
            "version": int,
            "updated_at": str,
            "updated_by": str,  # a run id, or "cli"
        },
        pk="scope",
        not_null={"entries", "chars", "version"},
        defaults={"entries": "[]", "chars": 0, "version": 0},
    )
