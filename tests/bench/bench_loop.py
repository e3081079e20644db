"""Agent loop benchmarks (issue 3): runner time per turn, pruning savings, first request size.

- Loop overhead: 100 turns with a no-op tool against an instant in-process model, so only
  runner's own work is timed (message bookkeeping, argument checks, events into SQLite,
  pruning checks). Target <= 5 ms per turn.
- Pruning: total prompt tokens of the synthetic 200-turn run with and without pruning.
  Target >= 3x fewer.

Main before: the same figures from main before's tree (``_before.each_tree``). Floor of the loop
overhead: bare ``sqlite3`` writing the same number of event rows of the same mean size, one
transaction each (the ledger writes a run must make). The pruning ratio is a policy figure with
no floor here (bench_cost.py has the floor of pruning).
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _before import each_tree  # noqa: E402
from _common import beside, read, row  # noqa: E402

from runner.agent.loop import Limits, run_loop  # noqa: E402
from runner.agent.pruning import Pruner  # noqa: E402
from runner.agent.types import Message, ToolCall, Usage  # noqa: E402
from runner.safety.redact import Redactor  # noqa: E402
from runner.store import (
    Store,  # noqa: E402
    ledger,  # noqa: E402
)
from runner.store.runs import Recorder
from runner.tools import ToolEntry, ToolResult  # noqa: E402
from runner.tools.context import ToolContext  # noqa: E402
from tests.agent.test_pruning import run as pruning_run  # noqa: E402


class Instant:
    model = "instant"

    def __init__(self, n: int):
        self.turns = [
            Message(None, (ToolCall(f"c{i}", "noop", '{"x": 1}'),), "tool_calls", Usage(10, 5)) for i in range(n)
        ] + [Message("done")]

    def complete(self, messages, tools, *, timeout=None, max_tokens=None):  # type: ignore[no-untyped-def]
        return self.turns.pop(0)


def loop_overhead(turns: int = 100) -> tuple[float, int, int]:
    """Seconds per turn, and the event rows the run wrote and their mean payload size."""
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(Path(tmp) / "r.db")
        run_id = ledger.open_run(store, job="bench", trigger="manual")
        emit = Recorder(store, run_id, Redactor())
        tool = ToolEntry(
            "noop",
            "terminal",
            "no-op",
            {"type": "object", "properties": {"x": {"type": "integer"}}},
            lambda args, ctx: ToolResult("ok"),
        )
        ctx = ToolContext(backend=None)  # type: ignore[arg-type]
        msgs = [{"role": "system", "content": "s" * 2000}, {"role": "user", "content": "go"}]
        start = time.perf_counter()
        run_loop(
            msgs,
            [tool],
            ctx,
            Instant(turns),
            Limits(max_iterations=turns + 5),
            emit=emit,
            prune=Pruner(76_800, emit=emit),
        )
        per_turn = (time.perf_counter() - start) / (turns + 1)
        rows, size = read(Path(tmp) / "r.db", "SELECT COUNT(*), AVG(LENGTH(payload)) FROM run_events")[0]
        store.close()
        return per_turn, int(rows), int(size or 0)


def floor(turns: int, rows: int, size: int) -> float:
    """Seconds per turn of bare sqlite3 writing ``rows`` event rows of ``size`` bytes, one
    transaction each, on a WAL file."""
    with tempfile.TemporaryDirectory() as tmp:
        conn = sqlite3.connect(Path(tmp) / "floor.db", isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("CREATE TABLE run_events (run_id TEXT, seq INT, ts TEXT, kind TEXT, payload TEXT, PRIMARY KEY (run_id, seq))")
        start = time.perf_counter()
        for seq in range(rows):
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO run_events VALUES ('r', ?, '2026-01-01T00:00:00', 'tool_result', ?)", (seq, "x" * size))
            conn.execute("COMMIT")
        seconds = time.perf_counter() - start
        conn.close()
    return seconds / (turns + 1)


def measure(rounds: int) -> dict[str, float]:
    """Milliseconds per turn (median of ``rounds``), the events written, the pruning token counts."""
    runs = [loop_overhead() for _ in range(rounds)]
    _, unpruned, _ = pruning_run(None)
    _, pruned, _ = pruning_run(30_000)
    return {
        "per_turn": statistics.median(r[0] for r in runs) * 1000,
        "rows": runs[0][1],
        "size": runs[0][2],
        "unpruned": sum(unpruned.sent_tokens),
        "pruned": sum(pruned.sent_tokens),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    measured = each_tree("bench_loop", "measure", rounds)
    here, before = measured["this tree"], measured.get("main before")
    per_turn = here["per_turn"]
    row(f"loop overhead, 100 turns, no-op tool (median of {rounds})", f"{per_turn:.2f} ms/turn", "<= 5 ms")
    a, b = here["unpruned"], here["pruned"]
    row("200-turn run, prompt tokens without / with pruning", f"{a:,} / {b:,}", "")
    row("  ratio", f"{a / b:.1f}x", ">= 3x")
    beside(
        "loop overhead per turn",
        per_turn,
        before and before["per_turn"],
        floor(100, here["rows"], here["size"]) * 1000,
        f"bare sqlite3: the same {here['rows']} event rows, a transaction each",
        "<= 5 ms",
    )
    beside(
        "pruning: tokens without / with",
        f"{a / b:.1f}x",
        before and f"{before['unpruned'] / before['pruned']:.1f}x",
        "n/a (a policy figure, not a cost; see bench_cost.py)",
        "",
        ">= 3x",
    )
    print("first request bytes for the sample job: see bench_startup.py")


if __name__ == "__main__":
    main()
