"""Colour and width for the human output of every command (never for ``--json``).

Colour: on when the stream is a terminal; ``NO_COLOR`` (any non-empty value) turns it off,
``FORCE_COLOR`` (any non-empty value) turns it on in a pipe too; ``NO_COLOR`` wins.
Width: the terminal's (``COLUMNS`` first, as ``shutil.get_terminal_size`` reads it); a pipe with
no ``COLUMNS`` is not cut, so ``grep`` and ``awk`` see whole rows.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from typing import IO, Any

import click

# a status word -> its colour; words not here are left plain
COLOURS = {
    # runs
    "succeeded": "green",
    "failed": "red",
    "timed_out": "red",
    "unknown": "red",
    "interrupted": "magenta",
    "running": "yellow",
    "queued": "cyan",
    "waiting": "cyan",
    "skipped": "bright_black",
    "missed": "bright_black",
    # kanban tasks
    "todo": "cyan",
    "ready": "cyan",
    "blocked": "magenta",
    "done": "green",
    "archived": "bright_black",
    # approvals, follow-ups, held notes
    "pending": "cyan",
    "granted": "green",
    "approved": "green",
    "accepted": "green",
    "fired": "green",
    "denied": "red",
    "rejected": "red",
    "expired": "bright_black",
    "cancelled": "bright_black",
    "abandoned": "bright_black",
    "refused": "red",
    "allowed": "green",
    # curator passes, doctor checks, deliveries, skills
    "ok": "green",
    "FAILED": "red",
    "BAD": "red",
    "WARN": "yellow",
    "active": "green",
    "stale": "yellow",
}
BOLD = frozenset({"failed", "timed_out", "unknown", "FAILED", "BAD"})
STATUS_HEADERS = frozenset({"STATUS", "LAST", "STATE", "DECISION", "DELIVERY"})
KEEP_HEADERS = frozenset({"RUN", "ID", "JOB", "NAME", "STATUS"})  # never dropped when a table is cut
GAP = 2
MIN_CELL = 6  # a column cut narrower than this is dropped instead (right to left)


def colour_on(stream: IO[Any] | None = None) -> bool:
    """Whether to colour what goes to ``stream`` (stdout by default)."""
    if os.environ.get("NO_COLOR", ""):
        return False
    if os.environ.get("FORCE_COLOR", ""):
        return True
    stream = stream if stream is not None else sys.stdout
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or odd stream: no colour
        return False


def status(word: str, *, err: bool = False, pad: int = 0, text: str | None = None) -> str:
    """``text`` (default ``word``) in the colour of status ``word`` (its first word) when colour
    is on for stdout (``err``: stderr), then spaces up to ``pad`` characters (outside the colour,
    so columns line up)."""
    shown = word if text is None else text
    padding = " " * (pad - len(shown))
    colour = COLOURS.get(word.split(" ", 1)[0])
    if colour is None or not colour_on(sys.stderr if err else sys.stdout):
        return shown + padding
    return click.style(shown, fg=colour, bold=True if word in BOLD else None) + padding


def echo(text: str, *, err: bool = False) -> None:
    """``click.echo`` that keeps the colour ``status`` chose (click would strip it in a pipe under
    ``FORCE_COLOR``) and strips it when ``NO_COLOR`` says so."""
    click.echo(text, err=err, color=colour_on(sys.stderr if err else sys.stdout))


def width() -> int | None:
    """The columns to fit output into, or None (a pipe without ``COLUMNS``: no limit)."""
    env = os.environ.get("COLUMNS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    if not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size().columns


def ellipsis() -> str:
    encoding = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "")
    return "…" if encoding.startswith("utf") else "~"


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, the cut marked with an ellipsis."""
    if len(text) <= limit:
        return text
    if limit <= 1:
        return text[:limit]
    return text[: limit - 1] + ellipsis()


def fit(natural: list[int], headers: Sequence[str], limit: int | None) -> tuple[list[int], list[int]]:
    """Column widths within ``limit`` and the columns kept, in order. The widest columns shrink
    first; columns that would go below ``MIN_CELL`` are dropped from the right, except the first
    and those headed ``KEEP_HEADERS`` (they shrink last)."""
    widths = list(natural)
    kept = list(range(len(widths)))
    if limit is None:
        return widths, kept

    def total() -> int:
        return sum(widths[i] for i in kept) + GAP * (len(kept) - 1)

    def keeps(i: int) -> bool:
        return i == 0 or headers[i] in KEEP_HEADERS

    while total() > limit:
        soft = [i for i in kept if not keeps(i) and widths[i] > MIN_CELL]
        if soft:
            widest = max(soft, key=lambda i: (widths[i], i))
            widths[widest] -= min(widths[widest] - MIN_CELL, total() - limit, max(1, widths[widest] // 4))
            continue
        droppable = [i for i in kept if not keeps(i)]
        if droppable:
            kept.remove(droppable[-1])
            continue
        hard = [i for i in kept if widths[i] > MIN_CELL]
        if not hard:
            break
        widest = max(hard, key=lambda i: (widths[i], i))
        widths[widest] -= min(widths[widest] - MIN_CELL, total() - limit)
    return widths, kept


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> None:
    """Rows under headers, left-aligned, fitted to the terminal's width; the cells of a column
    headed like a status (``STATUS_HEADERS``) are coloured by their word."""
    cells = [[("" if c is None else str(c)).replace("\n", " ") for c in row] for row in rows]
    natural = [len(h) for h in headers]
    for row in cells:
        for i, c in enumerate(row):
            natural[i] = max(natural[i], len(c))
    widths, kept = fit(natural, headers, width())
    coloured = {i for i in kept if headers[i] in STATUS_HEADERS}

    def line(row: Sequence[str], head: bool) -> str:
        parts = []
        for i in kept:
            text = clip(row[i], widths[i])
            pad = " " * (widths[i] - len(text))
            parts.append((text if head or i not in coloured else status(text)) + pad)
        return (" " * GAP).join(parts).rstrip()

    echo(line(list(headers), True))
    for row in cells:
        echo(line(row, False))
