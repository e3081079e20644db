"""runner.events: every kind has a payload type and a formatter; a payload reads back from its
stored JSON as it was written; a kind or shape this version does not know reads back as stored."""

from __future__ import annotations

import json
import types
import typing
from dataclasses import fields
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from runner.events import (
    FORMATS,
    PAYLOADS,
    Event,
    Payload,
    ProviderFallback,
    Recorded,
    Response,
    ToolCall,
    Unknown,
    decode,
    encode,
    show,
)
from runner.safety.redact import Redactor
from runner.statuses import Trigger
from runner.store import Store, dumps, ledger
from runner.store.runs import INSERT_EVENT, Recorder, events

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


def of_type(hint: Any) -> st.SearchStrategy[Any]:
    """Values of a payload field's annotation, as JSON can carry them."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        return st.one_of(*(of_type(a) for a in args))
    if origin is list:
        return st.lists(of_type(args[0]), max_size=3)
    if origin is dict:
        return st.dictionaries(st.text(), of_type(args[1]), max_size=3)
    simple = {
        str: st.text(),
        int: st.integers(),
        float: st.floats(allow_nan=False, allow_infinity=False),
        bool: st.booleans(),
        type(None): st.none(),
    }
    return simple.get(hint, JSON)


def payloads(cls: type[Payload]) -> st.SearchStrategy[Payload]:
    hints = typing.get_type_hints(cls)
    return st.builds(cls, **{f.name: of_type(hints[f.name]) for f in fields(cls)})


KIND_AND_PAYLOAD = st.sampled_from(list(Event)).flatmap(lambda k: st.tuples(st.just(k), payloads(PAYLOADS[k])))


def test_every_kind_has_a_payload_type_and_every_payload_type_a_formatter() -> None:
    assert set(PAYLOADS) == set(Event)
    assert set(FORMATS) == set(PAYLOADS.values()) | {Unknown}


@settings(max_examples=300)
@given(KIND_AND_PAYLOAD)
def test_a_payload_reads_back_from_its_stored_json(item: tuple[Event, Payload]) -> None:
    kind, payload = item
    stored = dumps(encode(payload))
    assert decode(str(kind), json.loads(stored)) == (kind, payload)
    row = Recorded.of({"seq": 1, "ts": "2026-01-01T00:00:00+00:00", "kind": str(kind), "payload": stored})
    assert row.payload == payload and row.as_json()["payload"] == json.loads(stored)
    assert row.shown().head  # every kind reads as a line


def test_a_field_left_at_its_default_is_not_stored_and_keywords_keep_their_names() -> None:
    reply = Response(1, "hi", [], "stop", 10, 2, 0.0, 0.5)
    assert "cached_tokens" not in encode(reply) and encode(reply)["content"] == "hi"
    assert encode(ProviderFallback("a", "b", "m", "rate_limited", "429"))["from"] == "a"
    assert decode("provider_fallback", {"from": "a", "to": "b", "model": "m", "reason": "r", "error": "e"})[1] == (
        ProviderFallback("a", "b", "m", "r", "e")
    )


def test_an_old_or_unknown_event_reads_back_as_stored(tmp_path) -> None:
    store = Store.open(tmp_path / "runner.db")
    run_id = ledger.open_run(store, job="a", trigger=Trigger.MANUAL)
    rows = [
        ("a_kind_from_a_later_version", {"x": 1}),
        ("tool_call", {"name": "t"}),  # an older shape: no id, no arguments
        ("response", "not json"),
    ]
    for seq, (kind, data) in enumerate(rows, 1):
        text = data if isinstance(data, str) else dumps(data)
        store.execute(INSERT_EVENT, (run_id, seq, "2026-01-01T00:00:00+00:00", kind, text))
    Recorder(store, run_id, Redactor())(Event.TOOL_CALL, ToolCall("c1", "terminal", {"command": "ls"}))
    got = events(store, run_id)
    assert [e.payload for e in got] == [
        Unknown({"x": 1}),
        Unknown({"name": "t"}),
        Unknown({"text": "not json"}),
        ToolCall("c1", "terminal", {"command": "ls"}),
    ]
    assert [e.as_json()["payload"] for e in got[:2]] == [{"x": 1}, {"name": "t"}]
    assert [e.shown().text() for e in got] == [
        'a_kind_from_a_later_version: {"x": 1}',
        'tool_call: {"name": "t"}',
        'response: {"text": "not json"}',
        '-> terminal {"command": "ls"}',
    ]


def test_a_model_turn_reads_as_its_lines() -> None:
    reply = Response(
        3, "done", [{"name": "terminal", "arguments": {"command": "ls"}}], "stop", 100, 20, 0.00012, 1.0, 40,
        reasoning="look first",
    )  # fmt: skip
    assert show(Event.RESPONSE, reply).text() == (
        "model turn 3: 100+20 tokens (40 cached), $0.00012\n"
        "    thinks: look first\n"
        '    calls: terminal({"command": "ls"})\n'
        "    says: done"
    )
