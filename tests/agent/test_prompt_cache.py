"""The cache-aware context policy (runner/agent/pruning.py) and cached input billed as providers
bill it: a long run's requests only append between rare prune steps, a prune never rewrites the
system prompt, the task or what earlier prunes left, the newest 10 turns stay whole; the fake
server's prefix cache reports cached tokens, which reach the ledger, the cost and `runs show`."""

from __future__ import annotations

import json
from typing import Any

import pytest

from runner.agent.loop import Limits, run_loop
from runner.agent.pruning import KEEP_TURNS, Pruner, total
from runner.agent.types import Message, ToolCall, Usage
from runner.events import encode
from runner.testing import call, final
from runner.testing.fakeopenai import FakeOpenAI, common_prefix
from runner.tools import ToolEntry, ToolResult
from runner.tools.context import ToolContext
from tests.agent.test_limits import config, kinds, last_run

OUTPUT = 20_000  # characters per tool result (the 60 turns x 20 KB)


class Recording:
    model = "rec"

    def __init__(self, turns: int):
        self.turns = [
            Message(f"step {i}: " + "thinking " * 10, (ToolCall(f"c{i}", "terminal", json.dumps({"n": i})),), "tool_calls", Usage())
            for i in range(turns)
        ] + [Message("final answer")]
        self.sent: list[list[dict[str, Any]]] = []

    def complete(self, messages, tools, *, timeout=None, max_tokens=None):  # type: ignore[no-untyped-def]
        self.sent.append(json.loads(json.dumps(messages)))
        return self.turns.pop(0)


def big(args: dict[str, Any], ctx: Any) -> ToolResult:
    return ToolResult("exit code 0\n" + (f"output of {args.get('n')} " * 3000)[:OUTPUT])


def long_run(turns: int = 60, budget: int = 76_800, summarize: Any = None) -> tuple[Recording, list[dict[str, Any]]]:
    llm = Recording(turns)
    events: list[tuple[str, dict[str, Any]]] = []
    msgs = [{"role": "system", "content": "you are a careful agent " * 100}, {"role": "user", "content": "do 60 things"}]
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    prune = Pruner(budget, emit=lambda k, p: events.append((k, encode(p))), summarize=summarize)
    result = run_loop(
        msgs,
        [ToolEntry("terminal", "terminal", "t", schema, big)],
        ToolContext(backend=None),
        llm,
        Limits(max_iterations=turns + 5),
        emit=lambda k, p: None,
        prune=prune,
    )
    assert result.status == "succeeded"
    return llm, [p for k, p in events if k == "prune"]


def dumped(messages: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(m, sort_keys=True) for m in messages]


def test_requests_only_append_between_rare_prunes_that_keep_the_pruned_prefix():
    llm, prunes = long_run()
    sent = [dumped(m) for m in llm.sent]
    steps = [i for i in range(1, len(sent)) if sent[i][: len(sent[i - 1])] != sent[i - 1]]
    assert len(steps) == len(prunes) >= 1
    # rare: every prune is followed by several requests that only append
    gaps = [b - a for a, b in zip(steps, steps[1:], strict=False)]
    assert gaps and min(gaps) >= 4, gaps
    kept = []
    for i in steps:
        before, after = sent[i - 1], sent[i]
        kept.append(next(k for k in range(len(after)) if k >= len(before) or after[k] != before[k]))
        # what stays byte-identical is the system prompt, the task and pruned turns only
        assert all(len(m["content"] or "") < 400 for m in llm.sent[i][2 : kept[-1]])
    # each prune keeps everything the earlier ones left, and moves the cut by several whole turns
    assert kept[0] >= 2 and all(b - a >= 2 * 4 for a, b in zip(kept, kept[1:], strict=False)), kept
    assert all(total(m) <= 76_800 for m in llm.sent)


@pytest.mark.parametrize("turns", [30, 60])
def test_the_newest_ten_turns_reach_every_request_whole(turns):
    llm, _ = long_run(turns)
    for request in llm.sent[KEEP_TURNS:]:
        assistants = [i for i, m in enumerate(request) if m["role"] == "assistant"]
        tail = request[assistants[-KEEP_TURNS] :]
        results = [m for m in tail if m["role"] == "tool"]
        assert len(results) == KEEP_TURNS and all(len(m["content"]) == OUTPUT + len("exit code 0\n") for m in results)


def test_summaries_keep_the_prefix_too():
    from runner.agent.auxiliary import AuxReply

    asked: list[int] = []

    def summarize(middle: list[dict[str, Any]]) -> AuxReply:
        asked.append(len(middle))
        return AuxReply(f"- summary {len(asked)}", Usage(10, 5), 0.0, "m", "p")

    llm, prunes = long_run(summarize=summarize)
    sent = [dumped(m) for m in llm.sent]
    steps = [i for i in range(1, len(sent)) if sent[i][: len(sent[i - 1])] != sent[i - 1]]
    assert asked and len(steps) == len(prunes) == len(asked)
    for i in steps:  # each summary goes after the earlier ones, which stay as they were
        notes = [k for k, m in enumerate(llm.sent[i - 1]) if m["role"] == "user" and k >= 2]
        assert sent[i][: 2 + len(notes)] == sent[i - 1][: 2 + len(notes)]


def test_the_fake_server_models_a_prefix_cache():
    assert common_prefix("abcdef", "abcxyz") == 3 and common_prefix("", "a") == 0 and common_prefix("ab", "ab") == 2
    server = FakeOpenAI(prefix_cache=True)
    body = {"messages": [{"role": "user", "content": "x" * 8000}]}
    first = server._cache(final("a"), body)
    assert first.cached == 0 and first.usage[0] == len(json.dumps(None) + json.dumps(body["messages"])) // 4
    body["messages"].append({"role": "assistant", "content": "y" * 4000})
    second = server._cache(final("b"), body)
    assert second.cached == 1920  # 8,000+ shared characters = 2,000+ tokens, in 128-token blocks
    assert server._cache(final("c"), {"messages": [{"role": "user", "content": "z" * 8000}]}).cached == 0
    assert server._cache(final("d"), {"messages": [{"role": "user", "content": "x" * 3000}]}).cached == 0  # < 1,024


def test_cached_tokens_from_the_prefix_cache_reach_the_ledger_the_cost_and_runs_show(project, fake):
    fake.prefix_cache = True
    config(project, fake, pricing="{input_per_mtok: 2.0, cached_input_per_mtok: 0.5, output_per_mtok: 8.0}")
    fake.add(*[call("terminal", {"command": f"seq 1 2000; echo {i}"}) for i in range(6)], final("done"))
    project.write_jobs("jobs:\n  c:\n    prompt: go\n    toolsets: [terminal]\n    context_budget: 12000\n")
    assert project.cli("run-job", "c").exit_code == 0
    row = last_run(project)
    turns = [p for k, p in kinds(project, row["id"]) if k == "response"]
    assert len(turns) == 7 and any(k == "prune" for k, _ in kinds(project, row["id"]))
    cached = [t.get("cached_tokens") or 0 for t in turns]
    assert sum(cached) == row["cached_tokens"] > 0 and cached[0] == 0
    prompt = sum(t["prompt_tokens"] for t in turns)
    out = sum(t["completion_tokens"] for t in turns)
    billed = ((prompt - sum(cached)) * 2.0 + sum(cached) * 0.5 + out * 8.0) / 1e6
    assert row["cost_usd"] == pytest.approx(billed, rel=1e-3)
    share = round(100 * row["cached_tokens"] / row["prompt_tokens"])
    assert f"({share}% of input tokens cached)" in project.cli("runs", "show", row["id"]).output
