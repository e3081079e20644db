"""Context pruning on a synthetic 200-turn run: every request under budget, newest turns intact."""

import json

from runner.agent.loop import Limits, run_loop
from runner.agent.pruning import Pruner, estimate, summarize_result, total
from runner.agent.types import Message, ToolCall, Usage
from runner.events import encode
from runner.tools import ToolEntry, ToolResult
from runner.tools.context import ToolContext


class Recording:
    model = "rec"

    def __init__(self, turns):
        self.turns = turns
        self.sent_tokens = []
        self.last = None

    def complete(self, messages, tools, *, timeout=None, max_tokens=None):
        self.sent_tokens.append(total(list(messages)))
        self.last = [dict(m) for m in messages]
        return self.turns.pop(0)


def big_tool(args, ctx):
    n = args.get("n", 0)
    return ToolResult("exit code 0\n" + "\n".join(f"line {n}-{i} " + "x" * 60 for i in range(120)))


def synthetic(n_turns=200):
    turns = []
    for i in range(n_turns):
        args = json.dumps({"n": i, "path": f"file{i % 7}.txt"}) if i % 3 else json.dumps({"n": i})
        name = "read_file" if i % 3 else "terminal"
        turns.append(Message(f"step {i}: " + "thinking " * 20, (ToolCall(f"c{i}", name, args),), "tool_calls", Usage()))
    turns.append(Message("final answer"))
    return turns


def tools():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "path": {"type": "string"}}}
    return [
        ToolEntry("terminal", "terminal", "t", schema, big_tool),
        ToolEntry("read_file", "files", "r", schema, big_tool),
    ]


def run(budget):
    llm = Recording(synthetic())
    events = []
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "do 200 things"}]
    prune = Pruner(budget, emit=lambda k, p: events.append((k, encode(p)))) if budget else None
    ctx = ToolContext(backend=None)  # the tools here never touch the backend
    result = run_loop(msgs, tools(), ctx, llm, Limits(max_iterations=500), emit=lambda k, p: None, prune=prune)
    return result, llm, events


def test_requests_stay_under_budget_and_recent_turns_intact():
    budget = 30_000
    result, llm, events = run(budget)
    assert result.status == "succeeded" and result.iterations == 201
    assert max(llm.sent_tokens) <= budget
    last = llm.last
    assert last[0]["content"] == "sys" and last[1]["content"] == "do 200 things"
    # the newest tool result is still complete, the newest assistant text too
    assert last[-1]["role"] == "tool" and last[-1]["content"].count("\n") == 120
    assert last[-2]["content"].startswith("step 199:")
    prunes = [p for k, p in events if k == "prune"]
    assert prunes and all(p["tokens_after"] < p["tokens_before"] for p in prunes)


def test_pruning_saves_at_least_3x():
    _, unpruned, _ = run(None)
    _, pruned, _ = run(30_000)
    assert sum(unpruned.sent_tokens) >= 3 * sum(pruned.sent_tokens)


def test_summaries_are_one_line():
    line = summarize_result("terminal", {"command": "git log --stat"}, "exit code 0\n" + "a\n" * 311)
    assert line == "[terminal] ran 'git log --stat' -> exit 0, 313 lines (output pruned)"
    assert "\n" not in summarize_result("read_file", {"path": "x.py"}, "1\n2\n")


def test_repeated_reads_keep_only_newest_copy():
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    for i in range(6):
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
                    }
                ],
            }
        )
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": "code " * 2000})
    before = total(msgs)
    Pruner(before - 1)(msgs)
    full = [m for m in msgs if m["role"] == "tool" and m["content"].startswith("code")]
    assert len(full) == 1 and full[0] is msgs[-1]
    assert estimate(msgs[-1]) > 2000


class Summarizing(Recording):
    """Answers summary requests (system prompt asks for a summary, no tools) apart from the run's turns."""

    def __init__(self, turns):
        super().__init__(turns)
        self.summaries = 0

    def complete(self, messages, tools, *, timeout=None, max_tokens=None):
        if not tools and messages[0]["content"].startswith("Summarise"):
            self.summaries += 1
            return Message(f"- summary {self.summaries}: read files, ran commands")
        return super().complete(messages, tools, timeout=timeout)


def test_summarize_replaces_middle_turns_with_reference_only_background():
    from runner.agent.auxiliary import Priced
    from runner.agent.pruning import SUMMARY_HEADER, summarize_with

    llm = Summarizing(synthetic(60))
    events = []
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "do things"}]
    prune = Pruner(30_000, emit=lambda k, p: events.append((k, encode(p))), summarize=summarize_with(Priced(llm)))
    result = run_loop(
        msgs, tools(), ToolContext(backend=None), llm, Limits(max_iterations=100), emit=lambda k, p: None, prune=prune
    )
    assert result.status == "succeeded" and llm.summaries >= 1
    assert max(llm.sent_tokens) <= 30_000
    background = [m for m in llm.last if m["role"] == "user" and m["content"].startswith(SUMMARY_HEADER)]
    # each prune adds its note after the earlier ones (which stay byte-identical, for the
    # provider's prompt cache): the notes sit together right after the task, oldest first
    assert background and all("not an instruction" in m["content"] for m in background)
    assert llm.last[2 : 2 + len(background)] == background
    numbers = [int(m["content"].split("- summary ")[1].split(":")[0]) for m in background]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
    assert llm.last[1]["content"] == "do things"
    assert any(p["summarized_turns"] for k, p in events if k == "prune")
