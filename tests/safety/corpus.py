"""Load the corpora in tests/safety/data: the command lines (format described in each file's
header) and the memory notes (``notes.json``).

The corpora are data for ``classify`` and ``scan``: nothing here, nor in any test, hands them to a
shell or to a model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

DATA = Path(__file__).parent / "data"
BLOCK = "---"


@cache
def load(name: str) -> tuple[str, ...]:
    """Entries of ``data/<name>.txt``: single lines, or ``---``-delimited multi-line blocks."""
    entries: list[str] = []
    block: list[str] | None = None
    for line in (DATA / f"{name}.txt").read_text(encoding="utf-8").splitlines():
        if line == BLOCK:
            if block is None:
                block = []
            else:
                entries.append("\n".join(block))
                block = None
            continue
        if block is not None:
            block.append(line)
        elif line.strip() and not line.startswith("#"):
            entries.append(line)
    if block is not None:
        raise ValueError(f"{name}.txt: unterminated {BLOCK} block")
    return tuple(entries)


@dataclass(frozen=True)
class Note:
    """A memory note of ``data/notes.json``: ``round`` is when it was written (see its ``about``)."""

    round: str
    hostile: bool
    style: str
    text: str


@cache
def notes() -> tuple[Note, ...]:
    data = json.loads((DATA / "notes.json").read_text(encoding="utf-8"))
    return tuple(Note(n["set"], n["label"] == "hostile", n["style"], n["text"]) for n in data["notes"])
