"""The loop as a function: messages, tools, a scripted model (the edge), limits."""

import threading

from runner.agent.loop import Limits, run_loop
from runner.agent.types import Message, ToolCall, Usage
from runner.backends.base import BackendContext
from runner.backends.local import LocalBackend
from runner.events import encode
from runner.testing import ScriptedLLM as Scripted
from runner.tools import discover
from runner.tools.context import ApprovalResult, ToolContext


def tc(name, args, i=0):
    return Message(None, (ToolCall(f"c{i}", name, args),), "tool_calls", Usage(10, 5))


def setup(tmp_path):
    backend = LocalBackend(BackendContext(workdir=tmp_path, home=tmp_path))
    ctx = ToolContext(backend=backend, approve=lambda c: ApprovalResult(True))
    tools = discover().select(["terminal", "files"], ctx)
    events = []
    return ctx, tools, events, lambda k, p: events.append((k, encode(p)))


def test_multi_call_turn_results_in_order(tmp_path):
    ctx, tools, events, emit = setup(tmp_path)
    turn = Message(
        None,
        (ToolCall("a", "terminal", '{"command": "echo one"}'), ToolCall("b", "terminal", '{"command": "echo two"}')),
        "tool_calls",
    )
    llm = Scripted(turn, Message("fin"))
    msgs = [{"role": "user", "content": "go"}]
    result = run_loop(msgs, tools, ctx, llm, Limits(), emit=emit)
    assert result.status == "succeeded" and result.output == "fin"
    tool_msgs = [m for m in msgs if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == ["a", "b"]
    assert "one" in tool_msgs[0]["content"] and "two" in tool_msgs[1]["content"]


def test_bad_arguments_and_unknown_tools_go_back_to_the_model(tmp_path):
    ctx, tools, events, emit = setup(tmp_path)
    llm = Scripted(
        tc("terminal", "{not json"),
        tc("teleport", "{}"),
        tc("terminal", '{"cmd": "ls"}'),
        tc("read_file", '{"path": 5}'),
        Message("ok"),
    )
    msgs = [{"role": "user", "content": "go"}]
    result = run_loop(msgs, tools, ctx, llm, Limits(), emit=emit)
    assert result.status == "succeeded"
    outs = [m["content"] for m in msgs if m["role"] == "tool"]
    assert "not valid JSON" in outs[0]
    assert "unknown tool 'teleport'" in outs[1]
    assert "missing required argument 'command'" in outs[2]
    assert "must be of type string" in outs[3]


def test_same_failing_call_three_times_is_a_loop(tmp_path):
    ctx, tools, events, emit = setup(tmp_path)
    llm = Scripted(*[tc("terminal", '{"command": "false"}', i) for i in range(5)])
    result = run_loop([{"role": "user", "content": "go"}], tools, ctx, llm, Limits(), emit=emit)
    assert result.status == "failed" and result.reason == "loop"
    assert len(llm.requests) == 4  # three failing calls, then the grace call without tools
    assert llm.requests[3]["tools"] == [] and llm.requests[3]["max_tokens"] is not None


def test_budget_tokens_stops(tmp_path):
    ctx, tools, events, emit = setup(tmp_path)
    llm = Scripted(*[tc("terminal", f'{{"command": "echo {i}"}}', i) for i in range(10)])
    result = run_loop([{"role": "user", "content": "go"}], tools, ctx, llm, Limits(max_tokens=40), emit=emit)
    assert result.reason == "budget_tokens" and result.iterations == 4  # 3 turns, then the grace call
    assert llm.requests[-1]["tools"] == []


def test_stop_event_interrupts_between_steps(tmp_path):
    ctx, tools, events, emit = setup(tmp_path)
    stop = threading.Event()
    stop.set()
    llm = Scripted(Message("never"))
    result = run_loop([{"role": "user", "content": "go"}], tools, ctx, llm, Limits(), emit=emit, stop=stop)
    assert result.status == "interrupted" and llm.requests == []


def test_registry_discovers_every_module():
    import pkgutil
    from pathlib import Path

    import runner.tools

    reg = discover()
    modules = {m.name for m in pkgutil.iter_modules([str(Path(runner.tools.__file__).parent)])} - {"context"}
    assert set(reg.modules) == {m for m in modules if not m.startswith("_")}
    assert {"terminal", "read_file", "write_file", "edit_file", "search_files", "list_dir"} <= set(reg.entries)


def test_messages_sent_to_the_run_join_before_the_next_request(tmp_path):
    """Steering: a message waiting at the start goes before the first request; one that comes while
    a turn's calls run goes after all their results, never between a call and its result."""
    from runner.events import Steer
    from runner.run.steer import Inbox

    ctx, tools, events, emit = setup(tmp_path)
    inbox = Inbox()
    inbox.put([Steer("s1", "alice@host", "be brief")])
    turn = Message(
        None,
        (ToolCall("a", "terminal", '{"command": "sleep 0.5; echo one"}'), ToolCall("b", "terminal", '{"command": "echo two"}')),
        "tool_calls",
    )
    llm = Scripted(turn, Message("fin"))
    later = threading.Timer(0.1, inbox.put, ([Steer("s2", "web:admin", "only the last hour")],))
    later.start()
    msgs = [{"role": "user", "content": "go"}]
    result = run_loop(msgs, tools, ctx, llm, Limits(), emit=emit, steering=inbox)
    later.join()
    assert result.status == "succeeded"
    first, second = (r["messages"] for r in llm.requests)
    assert [m["role"] for m in first] == ["user", "user"] and "be brief" in first[1]["content"]
    assert [m["role"] for m in second] == ["user", "user", "assistant", "tool", "tool", "user"]
    assert "web:admin" in second[-1]["content"] and "only the last hour" in second[-1]["content"]
    kinds = [k for k, _ in events if k in ("steered", "request", "tool_result")]
    assert kinds == ["steered", "request", "tool_result", "tool_result", "steered", "request"]
    assert inbox.delivered() == ["s1", "s2"] and inbox.left() == []
