"""Agent loop benchmarks (issue 3): runner time per turn, pruning savings, first request size.

- Loop overhead: 100 turns with a no-op tool against an instant in-process model, so only
  runner's own work is timed (message bookkeeping, argument checks, events into SQLite,
  pruning checks). Target <= 5 ms per turn.
- Pruning: total prompt tokens of the synthetic 200-turn run with and without pruning.
  Target >= 3x fewer.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import row  # noqa: E402

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


def loop_overhead(turns: int = 100) -> float:
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
        return (time.perf_counter() - start) / (turns + 1)


def main() -> None:
    per_turn = statistics.median(loop_overhead() for _ in range(5))
    row("loop overhead, 100 turns, no-op tool (median of 5)", f"{per_turn * 1000:.2f} ms/turn", "<= 5 ms")
    _, unpruned, _ = pruning_run(None)
    _, pruned, _ = pruning_run(30_000)
    a, b = sum(unpruned.sent_tokens), sum(pruned.sent_tokens)
    row("200-turn run, prompt tokens without / with pruning", f"{a:,} / {b:,}", "")
    row("  ratio", f"{a / b:.1f}x", ">= 3x")
    print("first request bytes for the sample job: see bench_startup.py")


if __name__ == "__main__":
    main()
