"""Property tests for the parsers of provider answers: tool-call deltas however a server splits
and numbers them assemble into the calls that were made; reset headers and error bodies of any
text never raise; the history check never raises on any list of messages."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from runner.agent.history import history_problem
from runner.agent.profiles import MAX_WAIT_S, error_message, reset_seconds, retry_after
from runner.agent.stream import DONE, Assembly, TextEvents

NAMES = st.sampled_from(["terminal", "read_file", "write_file", "search_files"])
ARGS = st.dictionaries(
    st.text(alphabet="abcdefgh_", min_size=1, max_size=6),
    st.one_of(st.integers(), st.text(max_size=20), st.booleans()),
    max_size=4,
)
CALLS = st.lists(
    st.tuples(NAMES, ARGS, st.one_of(st.none(), st.uuids().map(lambda u: f"call_{u.hex[:12]}"))),
    min_size=1,
    max_size=4,
    unique_by=lambda c: c[2] or id(c),
)


def chunk(calls: list[dict[str, Any]], finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"tool_calls": calls} if calls else {}, "finish_reason": finish}]}


def pieces(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in zip(points, points[1:], strict=False) if text[a:b]]


class Clock:
    deadline = None

    def progress(self, now: float) -> None:
        return None

    def idle_over(self, now: float) -> bool:
        return False


def assemble(chunks: list[dict[str, Any]]) -> list[tuple[str, Any, str | None]]:
    a = Assembly(provider="p")
    a.read([*chunks, DONE], clock=Clock(), events=TextEvents(lambda k, p: None))
    return [(c.name, json.loads(c.arguments), c.id) for c in a.message().tool_calls]


@settings(max_examples=200, deadline=None)
@given(CALLS, st.lists(st.integers(min_value=0, max_value=400), max_size=6), st.sampled_from(["openai", "index0", "noindex"]))
def test_tool_call_deltas_assemble_into_the_calls_made(calls, cuts, mode):
    """openai: each call at its own index, arguments in pieces; index0: every call whole at index
    0 (Ollama, some vLLM parsers); noindex: no index at all, arguments in pieces."""
    chunks = []
    for i, (name, args, call_id) in enumerate(calls):
        text = json.dumps(args)
        head: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": ""}}
        if call_id:
            head["id"] = call_id
        if mode == "index0":
            chunks.append(chunk([{**head, "index": 0, "function": {"name": name, "arguments": text}}]))
            continue
        if mode == "openai":
            head["index"] = i
        chunks.append(chunk([head]))
        for piece in pieces(text, cuts):
            delta: dict[str, Any] = {"function": {"arguments": piece}}
            if mode == "openai":
                delta["index"] = i
            chunks.append(chunk([delta]))
    chunks.append(chunk([], "tool_calls"))
    got = assemble(chunks)
    assert [(n, a) for n, a, _ in got] == [(n, a) for n, a, _ in calls]
    assert [i for _, _, i in got if i in {c[2] for c in calls if c[2]}] == [c[2] for c in calls if c[2]]


@given(st.text(max_size=40), st.floats(min_value=0, max_value=4e9))
def test_a_reset_value_of_any_text_is_a_bounded_wait_or_none(value, now):
    seconds = reset_seconds(value, now)
    assert seconds is None or 0.0 <= seconds <= MAX_WAIT_S


@given(st.dictionaries(st.sampled_from(["retry-after", "retry-after-ms", "x-ratelimit-reset", "x-ratelimit-reset-tokens",
                                        "x-ratelimit-remaining-tokens", "anthropic-ratelimit-requests-reset"]),
                       st.text(max_size=30)),
       st.text(max_size=200))  # fmt: skip
def test_retry_after_never_raises(headers, body):
    seconds = retry_after(headers, body, now=1.8e9)
    assert seconds is None or 0.0 <= seconds <= MAX_WAIT_S


JSONISH = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=20)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(
        ["error", "message", "code", "type", "object", "detail", "metadata", "reasons"]), inner, max_size=4)),
    max_leaves=12,
)  # fmt: skip


@given(st.one_of(JSONISH.map(json.dumps), st.text(max_size=200)))
def test_the_providers_words_come_out_of_any_error_body_as_text(body):
    words = error_message(body)
    assert isinstance(words, str) and len(words) <= 700


MESSAGES = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant", "tool"])},
        optional={
            "tool_call_id": st.sampled_from(["a", "b", "c"]),
            "tool_calls": st.lists(st.fixed_dictionaries({"id": st.sampled_from(["a", "b", "c"])}), max_size=3),
            "content": st.text(max_size=5),
        },
    ),
    max_size=12,
)


@given(MESSAGES)
def test_the_history_check_names_a_problem_or_passes_never_raises(messages):
    problem = history_problem(messages)
    assert problem is None or isinstance(problem, str)
