"""Load the command corpora in tests/safety/data (format described in each file's header).

The corpora are data for ``classify``: nothing here, nor in any test, hands them to a shell.
"""

from __future__ import annotations

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
