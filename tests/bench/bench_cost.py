"""Issue 36, deliverable 1: what a long run costs when the provider's prompt cache is counted.

60 turns, each a tool call answered with a 20 KB output, then a final answer: the real agent loop
and the real chat client over HTTP against the fake OpenAI server with its prefix cache on
(``FakeOpenAI(prefix_cache=True)``: a request's longest common prefix with the earlier requests,
tokens = characters / 4, in 128-token blocks from 1,024 tokens on, reported as
``usage.prompt_tokens_details.cached_tokens``, the way OpenAI's automatic caching bills).
Context budget 76,800 tokens (the default: 60% of a 128k window). Three policies, side by side:

- this tree's pruning (runner/agent/pruning.py);
- main before's pruning: the module as it was at 3fc469d (``git show 3fc469d:runner/agent/pruning.py``)
  loaded into this same loop, so only the pruning policy differs (the loop, client and tools are
  this tree's; the pruning module is the whole of the change);
- no pruning;
- the floor of pruning as such: the same run pruned on a fixed schedule (every k turns, for each k
  from 3 to 15, the context budget out of the way), keeping the newest 10 turns whole; the cheapest
  schedule is printed. A prune rewrites the history after the pruned region, so the request after it
  re-sends the 10 whole turns uncached; rarer prunes carry more cached tokens in between; the best k
  balances the two. No policy that prunes can bill much below it;
- the bound below any policy at all: every request from turn 11 on carries the 10 newest turns
  (cached at best) and each turn adds one new output (never cached).

Printed: bytes sent, prompt tokens, cached tokens, the billed cost at OpenAI's list prices for
gpt-4.1 (openai.com/api/pricing, as listed since the model's launch on 14 April 2025 and still in
December 2025: input $2.00 / 1M tokens, cached input $0.50 / 1M, output $8.00 / 1M), the same
tokens billed as if nothing were cached (what a ledger without cache figures showed), and the
fewest newest turns that reached every request from turn 11 on with their tool output whole.
Nothing is timed. Run: python tests/bench/bench_cost.py [--turns 60] [--budget 76800]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _common import REPO  # noqa: E402

from runner.agent import pruning  # noqa: E402
from runner.agent.auxiliary import AuxReply  # noqa: E402
from runner.agent.keys import Credential, StaticKeys  # noqa: E402
from runner.agent.llm import ChatClient  # noqa: E402
from runner.agent.loop import Limits, Pricing, run_loop  # noqa: E402
from runner.agent.types import Usage  # noqa: E402
from runner.testing.fakeopenai import FakeOpenAI, Reply  # noqa: E402
from runner.tools import ToolEntry, ToolResult  # noqa: E402
from runner.tools.context import ToolContext  # noqa: E402

GPT41 = Pricing(input_per_mtok=2.00, output_per_mtok=8.00, cached_input_per_mtok=0.50)
OUTPUT_BYTES = 20_000
COMPLETION = 150  # tokens the model writes per turn (its reasoning text and the call)
BEFORE = "3fc469d"
SYSTEM = "You are an unattended operations agent. " * 60  # ~2,400 characters


@dataclass(frozen=True)
class Figures:
    bytes_sent: int
    prompt: int
    cached: int
    completion: int
    ledger_cost: float  # what the loop priced (runner's ledger figure)
    intact: int  # fewest newest whole turns in a request from turn 11 on

    @property
    def billed(self) -> float:
        return GPT41.cost(Usage(self.prompt, self.completion, self.cached))

    @property
    def uncached(self) -> float:
        return GPT41.cost(Usage(self.prompt, self.completion, 0))


def old_pruner_module() -> Any:
    source = subprocess.run(
        ["git", "show", f"{BEFORE}:runner/agent/pruning.py"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "pruning_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("pruning_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["pruning_before"] = module
    spec.loader.exec_module(module)
    return module


def tool_output(args: dict[str, Any], ctx: Any) -> ToolResult:
    n = int(args.get("n", 0))
    lines = "".join(f"turn {n} line {i:04d}: " + "some log output " * 4 + "\n" for i in range(OUTPUT_BYTES // 80 + 1))
    return ToolResult(lines[:OUTPUT_BYTES])


def summary(middle: list[dict[str, Any]]) -> AuxReply:
    """``summarize: true``'s side call, scripted: a short note naming the turns it covers (its own
    tokens are not counted here, so the figures compare the run's requests only)."""
    steps = [str(m.get("content") or "")[:12] for m in middle if m["role"] == "assistant"]
    return AuxReply("- earlier steps: " + ", ".join(steps), Usage(0, 0), 0.0, "m", "p")


def intact_turns(body: dict[str, Any]) -> int:
    """How many of the newest turns of this request carry their tool output whole."""
    count = 0
    for m in reversed(body["messages"]):
        if m["role"] == "tool":
            if len(m["content"]) < OUTPUT_BYTES:
                return count
            count += 1
    return count


class Scheduled(pruning.Pruner):
    """This tree's pruning, forced to prune before every ``every``-th request and never otherwise
    (the budget is out of the way): the floor search."""

    def __init__(self, every: int) -> None:
        super().__init__(10**9)
        self.every, self.requests = every, 0

    def __call__(self, messages: list[dict[str, Any]]) -> list[AuxReply]:
        self.requests += 1
        return super().__call__(messages)

    def _pays(self, messages: list[dict[str, Any]], frontier: int, tail: int) -> bool:
        return self.requests % self.every == 0


def measure(name: str, make_pruner: Any, turns: int) -> Figures:
    fake = FakeOpenAI(prefix_cache=True).start()
    try:
        fake.add(
            *[
                Reply(content=f"step {i}: checking the next log", tool_calls=[("terminal", {"n": i})], usage=(0, COMPLETION))
                for i in range(turns)
            ],
            Reply(content="all done", usage=(0, COMPLETION)),
        )
        llm = ChatClient(base_url=fake.base_url, model="gpt-4.1", keys=StaticKeys(Credential("k", "sk-bench")))
        schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
        tools = [ToolEntry("terminal", "terminal", "run a command", schema, tool_output)]
        msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Check the last 60 logs."}]
        result = run_loop(
            msgs,
            tools,
            ToolContext(backend=None),
            llm,
            Limits(max_iterations=turns + 5),
            emit=lambda k, p: None,
            pricing=GPT41,
            prune=make_pruner(),
        )
        assert result.status == "succeeded", (name, result)
        requests = [r for r in fake.requests if r["status"] == 200]
        return Figures(
            bytes_sent=sum(r["bytes"] for r in requests),
            prompt=result.usage.prompt_tokens,
            cached=result.usage.cached_tokens,
            completion=result.usage.completion_tokens,
            ledger_cost=result.cost_usd,
            intact=min(intact_turns(r["body"]) for r in requests[10:]),
        )
    finally:
        fake.stop()


def main() -> None:
    global OUTPUT_BYTES
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--budget", type=int, default=76_800)
    parser.add_argument("--output-bytes", type=int, default=OUTPUT_BYTES)
    parser.add_argument("--summarize", action="store_true", help="summarize: true (a scripted one-line summary)")
    args = parser.parse_args()
    OUTPUT_BYTES = args.output_bytes
    before = old_pruner_module()
    policies = {
        "this tree": lambda: pruning.Pruner(args.budget, summarize=summary if args.summarize else None),
        f"main before ({BEFORE})": lambda: before.Pruner(args.budget, summarize=summary if args.summarize else None),
        "no pruning": lambda: None,
    }
    figures = {name: measure(name, make, args.turns) for name, make in policies.items()}
    if not args.summarize:
        schedules = {k: measure(f"every {k}", lambda k=k: Scheduled(k), args.turns) for k in range(3, 16)}
        best = min(schedules, key=lambda k: schedules[k].billed)
        figures[f"floor: prune every {best}"] = schedules[best]
    print(
        f"{args.turns} turns x {OUTPUT_BYTES / 1000:g} KB tool outputs, context budget {args.budget:,} tokens"
        f"{', summarize: true' if args.summarize else ''}, "
        "fake OpenAI with a prefix cache; gpt-4.1 list prices ($2.00 in, $0.50 cached in, $8.00 out per 1M)"
    )
    head = f"{'':<24}{'bytes sent':>12}{'prompt tok':>12}{'cached tok':>12}{'cached':>8}{'billed':>10}{'no-cache':>10}{'ledger':>10}{'whole turns':>13}"
    print(head)
    for name, f in figures.items():
        print(
            f"{name:<24}{f.bytes_sent / 1e6:>10.1f}MB{f.prompt:>12,}{f.cached:>12,}{100 * f.cached / f.prompt:>7.0f}%"
            f"{'$' + format(f.billed, '.3f'):>10}{'$' + format(f.uncached, '.3f'):>10}{'$' + format(f.ledger_cost, '.3f'):>10}{f.intact:>13}"
        )
    new, old = figures["this tree"], figures[f"main before ({BEFORE})"]
    print(
        f"billed, this tree / main before: {new.billed / old.billed:.0%} (goal <= 40%); "
        f"this tree billed / main before as billed without cache figures: {new.billed / old.uncached:.0%}"
    )
    bound = ((args.turns - 10) * 10 * OUTPUT_BYTES / 4 * 0.5 + args.turns * OUTPUT_BYTES / 4 * 2.0) / 1e6
    print(
        f"bound below any policy with the newest 10 turns whole: every request from turn 11 on carries >= 10 x "
        f"{OUTPUT_BYTES / 1000:g} KB (~{10 * OUTPUT_BYTES // 4:,} tokens, cached at best) and each turn adds "
        f"{OUTPUT_BYTES // 4:,} new ones: >= ${bound:.2f} = {bound / old.billed:.0%} of main before's bill"
    )
    floors = [f for name, f in figures.items() if name.startswith("floor")]
    if floors:
        print(
            f"this tree / the floor of pruning (best fixed schedule): {new.billed / floors[0].billed:.0%}; "
            f"the floor / main before as billed without cache figures: {floors[0].billed / old.uncached:.0%}"
        )
    print(json.dumps({k: {**vars(v), "billed": round(v.billed, 4)} for k, v in figures.items()}))


if __name__ == "__main__":
    main()
