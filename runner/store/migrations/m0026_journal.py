"""Durable runs (issue 33): ``run_journal``, the completed steps of a run, and ``step_keys``, the
side effects done under an idempotency key.

A journal entry is keyed by the run's first attempt (``root_run``: a resumed attempt's row names it
in ``parent_run``), the model turn and the tool call (``call_id`` is ``''`` for the model's answer
of the turn, and turn 0 holds the first messages). ``state`` is ``started`` (a tool call announced,
its result not written yet) or ``done``; ``body`` is JSON (the answer as a cassette records it, or
the tool's result). ``run_id`` is the attempt that wrote it. ``step_keys`` holds one row per side
effect done (a delivery to one sink, an alert): its key, the attempt that did it and when."""

from __future__ import annotations

from typing import Any

STATEMENTS = [
    """
    CREATE TABLE run_journal (
        root_run TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        turn INTEGER NOT NULL,
        call_id TEXT NOT NULL DEFAULT '',
        state TEXT NOT NULL CHECK (state IN ('started', 'done')),
        run_id TEXT NOT NULL,
        messages INTEGER NOT NULL DEFAULT 0,
        body TEXT NOT NULL,
        written_at TEXT NOT NULL,
        PRIMARY KEY (root_run, turn, call_id)
    )
    """,
    """
    CREATE TABLE step_keys (
        key TEXT PRIMARY KEY,
        root_run TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        run_id TEXT NOT NULL,
        what TEXT NOT NULL,
        done_at TEXT NOT NULL
    )
    """,
    "CREATE INDEX step_keys_root ON step_keys(root_run)",
]


def apply(db: Any) -> None:
    for statement in STATEMENTS:
        db.execute(statement)
