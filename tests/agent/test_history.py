"""The history invariant (runner/agent/history.py): what it refuses, that pruning and summarising
keep it under any sequence of turns (hypothesis), and that the loop refuses to send a broken one."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.agent.auxiliary import AuxReply
from runner.agent.history import history_problem
from runner.agent.loop import Limits, run_loop
from runner.agent.pruning import Pruner
from runner.agent.types import Usage
from runner.events import encode
from runner.tools.context import ToolContext

HEAD = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]


def turn(*ids: str) -> dict[str, Any]:
    calls = [{"id": i, "type": "function", "function": {"name": "terminal", "arguments": "{}"}} for i in ids]
    return {"role": "assistant", "content": None, "tool_calls": calls}


def answer(call_id: str, text: str = "ok") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def test_a_valid_history_passes():
    msgs = [*HEAD, turn("a", "b"), answer("a"), answer("b"), {"role": "assistant", "content": "done"}]
    assert history_problem(msgs) is None


@pytest.mark.parametrize(
    ("msgs", "words"),
    [
        ([*HEAD, answer("a")], "no assistant tool call before it"),
        ([*HEAD, turn("a"), answer("b")], "did not make"),
        ([*HEAD, turn("a"), answer("a"), answer("a")], "a second time"),
        ([*HEAD, turn("a", "b"), answer("a")], "no result: b"),
        ([*HEAD, turn("a"), {"role": "user", "content": "x"}, answer("a")], "no result: a"),
        ([*HEAD, turn("a", "a"), answer("a"), answer("a")], "same id"),
        ([*HEAD, turn("a"), answer("a"), {"role": "user", "content": "summary"}, answer("a")], "no assistant"),
    ],
)
def test_broken_histories_are_named(msgs, words):
    problem = history_problem(msgs)
    assert problem is not None and words in problem


def summarizer(middle: list[dict[str, Any]]) -> AuxReply:
    return AuxReply("- earlier steps happened", Usage(10, 5), 0.0, "m", "p")


# a conversation grows by turns: an assistant turn with 0-4 calls (results of random sizes) or a
# user note; a prune runs at a random budget after each turn
TURNS = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=4),  # calls in the turn (0: a plain assistant or user message)
        st.lists(st.integers(min_value=0, max_value=12_000), min_size=4, max_size=4),  # result sizes
        st.integers(min_value=0, max_value=400),  # assistant text size
        st.booleans(),  # user note instead of an assistant text (when 0 calls)
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(TURNS, st.integers(min_value=1_000, max_value=20_000), st.booleans())
def test_pruning_and_summarising_never_break_the_history(turns, budget, summarize):
    grow(turns, budget, summarize)


def grow(turns: list[Any], budget: int, summarize: bool) -> list[dict[str, Any]]:
    """The conversation ``turns`` make, pruned after each turn; the history is checked each time."""
    msgs = [dict(m) for m in HEAD]
    pruner = Pruner(budget, summarize=summarizer if summarize else None)
    for n, (calls, sizes, text, note) in enumerate(turns):
        if calls:
            ids = [f"c{n}_{k}" for k in range(calls)]
            args = json.dumps({"command": "cat " + "f" * 30})
            made = [{"id": i, "type": "function", "function": {"name": "terminal", "arguments": args}} for i in ids]
            msgs.append({"role": "assistant", "content": "x" * text, "tool_calls": made})
            msgs += [answer(i, "exit code 0\n" + "y" * sizes[k]) for k, i in enumerate(ids)]
        elif note:
            msgs.append({"role": "user", "content": "z" * text})
        else:
            msgs.append({"role": "assistant", "content": "w" * text})
        pruner(msgs)
        assert history_problem(msgs) is None, (history_problem(msgs), [m["role"] for m in msgs])
        assert msgs[0] == HEAD[0] and msgs[1] == HEAD[1]
    return msgs


def test_the_loop_refuses_to_send_a_broken_history():
    class Never:
        model = "never"

        def complete(self, messages, tools, *, timeout=None, max_tokens=None):
            raise AssertionError("a broken history was sent")

    events: list[tuple[str, dict[str, Any]]] = []
    msgs = [*HEAD, answer("ghost")]
    from runner.errors import ModelError

    with pytest.raises(ModelError) as err:
        run_loop(
            msgs, [], ToolContext(backend=None), Never(), Limits(), emit=lambda k, p: events.append((k, encode(p)))
        )
    assert err.value.reason == "invalid_history"
    assert [k for k, _ in events] == ["invalid_history"]


def test_the_summary_never_swallows_the_call_of_a_protected_result():
    """The shape of the bug hypothesis found first: the last turn's results fill the protected
    share, so the protected tail used to start at its last tool message and the summary took the
    assistant turn (and the other results) that it answers."""
    msgs = grow([(0, [0] * 4, 0, False), (4, [0, 0, 0, 3596], 0, False)], 1_000, True)
    assert [c["id"] for c in next(m for m in msgs if m.get("tool_calls"))["tool_calls"]] == [f"c1_{k}" for k in range(4)]
