"""Durable runs: what the journal costs a step, on SQLite.

A step is a model turn with one tool call: the ``response`` event and the turn's journal entry in
one transaction, the ``tool_call`` event with the call's ``started`` entry, the ``tool_result``
event with its ``done`` entry (three writes, as a run without a journal makes three event writes).
Measured against the same three events written without the journal, on a real runner.db.
Target: journal overhead <= 2 ms per step (median).

Main before: the same measurement run by main before's tree (``_before.each_tree``). Floor: bare
``sqlite3`` on a WAL file (synchronous=NORMAL, as the store), three transactions each writing an
event-sized row and a journal-sized row, less the same three transactions without the journal
row: what adding the rows costs SQLite itself.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _before import each_tree  # noqa: E402
from _common import beside, pct, row  # noqa: E402

STEPS = 300


def floor(steps: int) -> list[float]:
    """Milliseconds per step that three bare sqlite3 transactions spend on the journal's rows."""
    body = json.dumps({"content": "thinking " * 40, "tool_calls": [{"id": "call_1", "name": "terminal"}]})
    event = json.dumps({"content": "thinking " * 40, "result": "file\n" * 200})
    with tempfile.TemporaryDirectory() as tmp:
        conn = sqlite3.connect(Path(tmp) / "floor.db", isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, run_id TEXT, kind TEXT, body TEXT)")
        conn.execute("CREATE TABLE journal (run TEXT, turn INT, call TEXT, state TEXT, body TEXT, PRIMARY KEY (run, turn, call))")

        def step(turn: int, journal: bool) -> float:
            start = time.perf_counter()
            for state in ("answered", "started", "done"):
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT INTO events (run_id, kind, body) VALUES ('r', ?, ?)", (state, event))
                if journal:
                    conn.execute("INSERT OR REPLACE INTO journal VALUES ('r', ?, 'c', ?, ?)", (turn, state, body))
                conn.execute("COMMIT")
            return (time.perf_counter() - start) * 1000

        plain = [step(turn, False) for turn in range(steps)]
        journaled = [step(turn, True) for turn in range(steps)]
        conn.close()
    return [j - p for j, p in zip(sorted(journaled), sorted(plain), strict=True)]


def measure(steps: int) -> dict[str, list[float]]:
    """Milliseconds per step with the journal and without it (the three events alone)."""
    from runner.agent.types import Message, ToolCall, Usage
    from runner.events import Event, Response, ToolResult
    from runner.events import ToolCall as CallEvent
    from runner.run.journal import Journal
    from runner.safety.redact import Redactor
    from runner.statuses import Trigger
    from runner.store import Store, ledger
    from runner.store.runs import Recorder

    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(Path(tmp) / "runner.db")
        run_id = ledger.open_run(store, job="bench", trigger=Trigger.MANUAL)
        emit = Recorder(store, run_id, Redactor())
        journal = Journal(store, run_id, run_id, redact=Redactor().redact_obj)  # as a run writes it
        reply = Message("thinking " * 40, (ToolCall("call_1", "terminal", '{"command": "ls -la"}'),), "tool_calls", Usage(900, 60))
        call = reply.tool_calls[0]
        result = "file\n" * 200

        def events(turn: int) -> tuple:
            return (
                lambda: emit(Event.RESPONSE, Response(iteration=turn, content=reply.content, tool_calls=[], finish_reason="tool_calls", prompt_tokens=900, completion_tokens=60, cost_usd=0.001, seconds=0.5)),
                lambda: emit(Event.TOOL_CALL, CallEvent(call.id, call.name, {"command": "ls -la"})),
                lambda: emit(Event.TOOL_RESULT, ToolResult(call.id, call.name, result, len(result), False, 0.01)),
            )

        plain, journaled = [], []
        for turn in range(1, steps + 1):
            response, announce, report = events(turn)
            start = time.perf_counter()
            response()
            announce()
            report()
            plain.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            journal.answered(turn, 2 * turn, reply, response)
            journal.started(turn, call, announce)
            journal.finished(turn, call, result, False, report)
            journaled.append((time.perf_counter() - start) * 1000)
        store.close()
    return {"journaled": journaled, "plain": plain}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=STEPS)
    args = parser.parse_args()
    measured = each_tree("bench_journal", "measure", args.steps)
    journaled, plain = measured["this tree"]["journaled"], measured["this tree"]["plain"]
    overhead = [j - p for j, p in zip(sorted(journaled), sorted(plain), strict=True)]
    row("step with journal, p50 (ms)", f"{pct(journaled, 50):.2f}", "-")
    row("step with journal, p95 (ms)", f"{pct(journaled, 95):.2f}", "-")
    row("step without journal (3 events), p50 (ms)", f"{pct(plain, 50):.2f}", "-")
    row("journal overhead per step, p50 (ms)", f"{pct(overhead, 50):.2f}", "<= 2 ms")
    row("journal overhead per step, p95 (ms)", f"{pct(overhead, 95):.2f}", "-")
    before = measured.get("main before")
    beside(
        "journal overhead per step, p50",
        pct(overhead, 50),
        before and pct([j - p for j, p in zip(sorted(before["journaled"]), sorted(before["plain"]), strict=True)], 50),
        pct(floor(args.steps), 50),
        "bare sqlite3: the journal rows added to 3 WAL transactions",
        "<= 2 ms",
    )


if __name__ == "__main__":
    main()
