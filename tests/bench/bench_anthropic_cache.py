"""Issue 30, deliverable 2: prompt caching on the native Anthropic provider.

A 20-turn run (the real agent loop, the real ``AnthropicClient`` over HTTP) against the Messages
API fake (tests/fakeanthropic.py, which works out cache reads and writes from the
``cache_control`` breakpoints the way the API documents them, tokens = len(JSON) / 4): a
realistic system prompt and 15 tool schemas (the frozen prefix, a few thousand tokens), 19 tool
calls each answered with a 20 KB tool output, then a final answer. Run twice, with ``cache:
true`` and ``cache: false``; printed side by side: prompt tokens billed, of them cache reads and
cache writes, cost at Claude Sonnet prices ($3/MTok input, $0.30 cache read, $3.75 cache write,
$15 output), and the share of the frozen prefix served from the cache on turns 2-20 (target
>= 80%). Nothing is timed.

Main before: the cached run from main before's tree (``_before.each_tree``). Floor of the cost:
the same requests as if each prompt token were written to the cache once (at the write price)
and read from it on every later turn, the output at its price: what this run costs at the best
any caching policy can do.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _before import in_tree, or_reason, trees  # noqa: E402
from _common import beside, row  # noqa: E402

from runner.agent.anthropic import AnthropicClient  # noqa: E402
from runner.agent.keys import Credential, StaticKeys  # noqa: E402
from runner.agent.loop import Limits, Pricing, run_loop  # noqa: E402
from runner.events import Response  # noqa: E402
from runner.tools import ToolEntry, ToolResult  # noqa: E402
from runner.tools.context import ToolContext  # noqa: E402
from tests.fakeanthropic import FakeAnthropic, _blocks, text, tool  # noqa: E402

TURNS = 20
OUTPUT_BYTES = 20_000
SONNET = Pricing(input_per_mtok=3.0, output_per_mtok=15.0, cached_input_per_mtok=0.30, cache_write_per_mtok=3.75)
TOOL_NAMES = [
    "terminal", "read_file", "write_file", "patch", "search_files", "list_dir", "web_search", "web_fetch",
    "memory", "skill_view", "skill_manage", "todo", "delegate_task", "session_search", "send_message",
]  # fmt: skip

SYSTEM = "\n\n".join(
    [
        "You are the nightly operations agent of a small SaaS company. You run unattended on a schedule; "
        "nobody reads your intermediate steps, only your final report, so make it complete and exact.",
        "## Environment\nYou work in a Linux container with the repository checked out at /work/app. The "
        "production database is read-only from here. Secrets are in the environment and must never appear "
        "in your output or in files you write. Network access is limited to the company's own services.",
        "## How to work\n"
        + "\n".join(
            f"{i}. {rule}"
            for i, rule in enumerate(
                [
                    "Read before you write: look at a file's current content before changing it.",
                    "Prefer small, reversible changes; never force-push, never rewrite history.",
                    "Run the test suite after every change and before the final report.",
                    "When a command fails, read its error output fully before you try again.",
                    "Do not retry the same failing command more than twice; change approach instead.",
                    "Keep a todo list for tasks with more than three steps and update it as you go.",
                    "When you are unsure whether an action is safe, do not take it; report it instead.",
                    "Summarize long tool outputs for yourself instead of re-reading them.",
                    "Cite file paths and line numbers for every finding in the report.",
                    "Stop and report when the budget is nearly used up.",
                ]
                * 3,
                1,
            )
        ),
        "## Report format\nStart with a one-line status (OK, DEGRADED or FAILED), then the findings as a "
        "bulleted list (most severe first), then the changes you made with their commit ids, then what is "
        "left for a human. Use plain Markdown; no tables wider than 100 characters.\n" * 4,
        "## Services\n"
        + "\n".join(
            f"- svc-{i:02d}: {random.Random(i).choice(['api', 'worker', 'cron', 'billing', 'search'])} service, "
            f"owner team-{i % 7}, runbook https://wiki.example.com/runbooks/svc-{i:02d}, on-call rotation {i % 3}"
            for i in range(40)
        ),
    ]
)


def schema(name: str, i: int) -> dict[str, Any]:
    props = {
        f"{name}_arg{j}": {"type": "string", "description": f"Argument {j} of {name}: what it means and its format."}
        for j in range(4)
    }
    props["timeout"] = {"type": "integer", "minimum": 1, "maximum": 600, "description": "Seconds before it stops."}
    return {
        "type": "object",
        "properties": props,
        "required": [f"{name}_arg0"],
        "additionalProperties": False,
    } | ({"description": f"The {name} tool's parameters."} if i % 2 else {})


def output(turn: int) -> str:
    """20 KB of plausible tool output (a log excerpt), different each turn."""
    rnd = random.Random(turn)
    lines, size = [], 0
    while size < OUTPUT_BYTES:
        line = (
            f"2025-06-{rnd.randint(1, 28):02d}T{rnd.randint(0, 23):02d}:{rnd.randint(0, 59):02d}:{rnd.randint(0, 59):02d}Z "
            f"svc-{rnd.randint(0, 39):02d} {rnd.choice(['INFO', 'WARN', 'ERROR'])} "
            f"request {rnd.getrandbits(48):012x} took {rnd.randint(1, 4000)} ms status {rnd.choice([200, 200, 404, 500])}"
        )
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)[:OUTPUT_BYTES]


def one_run(cache: bool) -> dict[str, Any]:
    server = FakeAnthropic().start()
    try:
        for turn in range(1, TURNS):
            name = TOOL_NAMES[turn % len(TOOL_NAMES)]
            server.add(tool(name, {f"{name}_arg0": f"step {turn}"}, say=f"Step {turn}: checking with {name}."))
        server.add(text("OK. Report follows.", output_tokens=400))
        tools = [
            ToolEntry(
                name,
                "bench",
                f"The {name} tool. " + "It does one well-defined thing and reports what it did in detail. " * 3,
                schema(name, i),
                lambda args, ctx, turn=[0]: (turn.__setitem__(0, turn[0] + 1), ToolResult(output(turn[0])))[1],
            )
            for i, name in enumerate(TOOL_NAMES)
        ]
        responses: list[Response] = []
        llm = AnthropicClient(
            base_url=server.base_url,
            model="claude-sonnet-4-5",
            keys=StaticKeys(Credential("ANTHROPIC_API_KEY", "sk-ant-bench")),
            cache=cache,
        )
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Run tonight's checks."}]
        result = run_loop(
            messages,
            tools,
            ToolContext(backend=None),  # type: ignore[arg-type]
            llm,
            Limits(max_iterations=TURNS + 1),
            emit=lambda kind, payload: responses.append(payload) if isinstance(payload, Response) else None,
            pricing=SONNET,
        )
        first = server.requests[0]["body"]
        frozen = _blocks({"tools": first.get("tools"), "system": first.get("system"), "messages": []})
        prefix = sum(len(t) for t, _ in frozen) // 4
        shares = [min(r.cached_tokens or 0, prefix) / prefix for r in responses[1:]]
        return {
            "turns": len(responses),
            "status": result.status,
            "prompt": sum(r.prompt_tokens for r in responses),
            "prompts": [r.prompt_tokens for r in responses],
            "read": sum(r.cached_tokens or 0 for r in responses),
            "written": sum(r.cache_write_tokens or 0 for r in responses),
            "output": sum(r.completion_tokens for r in responses),
            "cost": result.cost_usd,
            "prefix": prefix,
            "share": min(shares) if shares else 0.0,
            "breakpoints": json.dumps(first).count('"cache_control"'),
        }
    finally:
        server.stop()


def floor_cost(run: dict[str, Any]) -> float:
    """USD if every prompt token were written to the cache once and read on every later turn."""
    cost, seen = run["output"] * SONNET.output_per_mtok, 0
    for prompt in run["prompts"]:
        cost += min(seen, prompt) * SONNET.cached_input_per_mtok + max(0, prompt - seen) * SONNET.cache_write_per_mtok
        seen = prompt
    return cost / 1e6


def main() -> None:
    measured = {t.name: or_reason(t, lambda t=t: in_tree(t, "bench_anthropic_cache", "one_run", True)) for t in trees()}
    on, off, before = measured["this tree"], one_run(False), measured.get("main before")
    assert on["turns"] == off["turns"] == TURNS, (on, off)
    print(
        f"Anthropic prompt caching: a {TURNS}-turn run, {len(TOOL_NAMES)} tools, {OUTPUT_BYTES // 1000} KB tool outputs"
    )
    print(
        f"frozen prefix (tools + system): {on['prefix']:,} tokens; breakpoints per request: {on['breakpoints']} / {off['breakpoints']}"
    )
    print(f"{'':<40} {'cache_control':>16} {'without':>16}")
    for label, key, fmt in [
        ("prompt tokens billed", "prompt", "{:,}"),
        ("  of them cache reads (0.1x)", "read", "{:,}"),
        ("  of them cache writes (1.25x)", "written", "{:,}"),
        ("  of them uncached input (1x)", None, "{:,}"),
        ("output tokens", "output", "{:,}"),
        ("cost at Sonnet prices (USD)", "cost", "${:.4f}"),
    ]:
        values = [r["prompt"] - r["read"] - r["written"] if key is None else r[key] for r in (on, off)]
        print(f"{label:<40} {fmt.format(values[0]):>16} {fmt.format(values[1]):>16}")
    print()
    row("cost with caching / without", f"{on['cost'] / off['cost']:.2f}x", "lower is better")
    row("frozen prefix served from cache, turns 2-20 (the lowest)", f"{on['share']:.0%}", ">= 80%")
    row("  the same without cache_control", f"{off['share']:.0%}", "(0%: no caching)")
    then_cost: float | str | None = None
    then_share: str | None = None
    if isinstance(before, str):
        print(f"main before: {before}")
        then_cost = then_share = "not measured (see above)"
    elif before:
        then_cost, then_share = before["cost"], f"{before['share']:.0%}"
    beside("cost of the run with cache_control", on["cost"], then_cost, floor_cost(on),
           "each prompt token written to the cache once, read on every later turn", "lower is better", "USD")
    beside("frozen prefix from cache, lowest", f"{on['share']:.0%}", then_share,
           "n/a (a share, 100% at best)", "", ">= 80%")


if __name__ == "__main__":
    main()
