"""Wire compatibility: responses as the OpenAI API reference shows them (tests/agent/wire/*.http:
status line, headers, body byte for byte) served by the fake server and read by the real client;
and the request the client sends for the reference's tool-calling example."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runner.agent.keys import Credential, StaticKeys
from runner.agent.llm import ChatClient
from runner.errors import ModelError
from runner.events import encode
from runner.testing import Reply

WIRE = Path(__file__).parent / "wire"
KEY = "sk-wire-0123456789abcdef"


def recorded(name: str) -> Reply:
    """A ``Reply`` serving ``wire/NAME`` as recorded: its status, headers and raw body."""
    head, _, body = (WIRE / name).read_bytes().partition(b"\n\n")
    status_line, *header_lines = head.decode().splitlines()
    headers = dict(line.split(": ", 1) for line in header_lines)
    return Reply(status=int(status_line.split()[1]), headers=headers, raw=body)


def client(fake, *, stream: bool, model: str = "gpt-4o-mini", **kw: Any) -> tuple[ChatClient, list]:
    seen: list[tuple[str, dict[str, Any]]] = []
    llm = ChatClient(
        base_url=fake.base_url,
        model=model,
        keys=StaticKeys(Credential("OPENAI_API_KEY", KEY)),
        stream=stream,
        emit=lambda kind, payload: seen.append((kind, encode(payload))),
        sleep=lambda seconds: seen.append(("slept", {"s": seconds})),
        **kw,
    )
    return llm, seen


def test_the_tool_calling_request_matches_the_reference(fake):
    reference = json.loads((WIRE / "chat_tools.request.json").read_text())
    fake.add(recorded("chat_tools.http"))
    llm, _ = client(fake, stream=False)
    reply = llm.complete(reference["messages"], reference["tools"])
    sent = fake.requests[0]["body"]
    assert {k: sent[k] for k in reference} == reference
    assert fake.requests[0]["headers"]["authorization"] == f"Bearer {KEY}"
    assert reply.finish_reason == "tool_calls" and reply.content is None
    assert [(c.id, c.name, json.loads(c.arguments)) for c in reply.tool_calls] == [
        ("call_abc123", "get_current_weather", {"location": "Boston, MA"})
    ]
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.model) == (82, 17, "gpt-4o-mini")


def test_streamed_tool_call_deltas_and_the_usage_chunk(fake):
    fake.add(recorded("stream_tools.http"))
    llm, _ = client(fake, stream=True)
    reply = llm.complete([{"role": "user", "content": "weather?"}], [])
    assert fake.requests[0]["body"]["stream_options"] == {"include_usage": True}
    assert [(c.id, json.loads(c.arguments)) for c in reply.tool_calls] == [
        ("call_DdmO9pD3xa9XTPNJ32zg2hcA", {"location": "Paris, France"}),
        ("call_2", {"location": "Bogotá, Colombia"}),
    ]
    assert reply.finish_reason == "tool_calls"
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.cached_tokens) == (2006, 300, 1920)


def test_streamed_reasoning_content_is_kept_apart_from_the_answer(fake):
    fake.add(recorded("reasoning_stream.http"))
    llm, _ = client(fake, stream=True, model="deepseek-reasoner")
    reply = llm.complete([{"role": "user", "content": "hi"}], [])
    assert reply.content == "Hello! How can I help?"
    assert reply.reasoning == "The user greets me; greet back."
    assert reply.to_record()["reasoning"] == reply.reasoning
    conversation = [{"role": "user", "content": "hi"}, reply.to_dict(), {"role": "user", "content": "more"}]
    assert conversation[1]["reasoning"] == reply.reasoning  # kept in the run's transcript
    fake.add(recorded("reasoning_stream.http"))
    llm.complete(conversation, [])
    sent = fake.requests[1]["body"]["messages"][1]
    assert sent == {"role": "assistant", "content": "Hello! How can I help?"}  # never sent back to the model


def test_reasoning_model_response_with_cached_prompt_tokens(fake):
    fake.add(recorded("reasoning_cached.http"))
    llm, _ = client(fake, stream=False, model="o3-mini", options=None)
    reply = llm.complete([{"role": "user", "content": "6*7?"}], [], max_tokens=200)
    assert fake.requests[0]["body"]["max_completion_tokens"] == 200  # a reasoning model
    assert (reply.content, reply.reasoning) == ("The answer is 42.", "Six times seven is forty-two.")
    assert (reply.usage.prompt_tokens, reply.usage.cached_tokens) == (1117, 1024)


def test_content_given_as_parts_and_a_refusal(fake):
    fake.add(recorded("content_parts.http"), recorded("refusal.http"))
    llm, _ = client(fake, stream=False)
    parts = llm.complete([], [])
    assert parts.content == "Part one. Part two." and len(parts.parts) == 2
    assert parts.to_record()["content_parts"][1] == {"type": "text", "text": "Part two."}
    refused = llm.complete([], [])
    assert refused.content is None and refused.refusal == "I'm sorry, I cannot assist with that request."
    assert refused.answer == refused.refusal


@pytest.mark.parametrize("stream", [False, True])
def test_400_fails_at_once_with_the_providers_message(fake, stream):
    fake.add(recorded("error_400.http"), recorded("chat_tools.http"))
    llm, seen = client(fake, stream=stream, max_retries=3)
    with pytest.raises(ModelError) as info:
        llm.complete([], [])
    assert info.value.status == 400 and info.value.reason == "model_error"
    assert "Unsupported value: 'temperature' does not support 0.2" in str(info.value)
    assert len(fake.requests) == 1 and seen == []


def test_401_is_an_auth_failure_naming_the_provider_message(fake):
    fake.add(recorded("error_401.http"))
    llm, _ = client(fake, stream=True)
    with pytest.raises(ModelError) as info:
        llm.complete([], [])
    assert (info.value.status, info.value.reason) == (401, "auth_failed")
    assert "Incorrect API key provided" in str(info.value)


def test_429_waits_as_its_rate_limit_headers_say_then_retries(fake):
    fake.add(recorded("error_429.http"), recorded("chat_tools.http"))
    llm, seen = client(fake, stream=False, max_retries=1)
    reply = llm.complete([], [])
    assert reply.tool_calls and len(fake.requests) == 2
    retry = next(p for k, p in seen if k == "model_retry")
    # the window that ran out (remaining-requests 0) decides: 20s, as the message says; not the
    # tokens window's 6m0s, which was not spent
    assert retry["wait_s"] == 20.0
    assert ("slept", {"s": 20.0}) in seen
    assert "Rate limit reached for gpt-4o-mini" in retry["error"]


def test_500_is_retried_then_given_up_with_the_message(fake):
    fake.add(recorded("error_500.http"), recorded("error_500.http"))
    llm, seen = client(fake, stream=True, max_retries=1, retry_backoff=0.0)
    with pytest.raises(ModelError) as info:
        llm.complete([], [])
    assert info.value.status == 500 and "gave up after 1 retries" in str(info.value)
    assert "The server had an error while processing your request" in str(info.value)
    assert [k for k, _ in seen].count("model_retry") == 1


def test_a_server_that_answers_a_stream_request_with_plain_json(fake):
    fake.add(recorded("chat_tools.http"), recorded("refusal.http"))
    llm, _ = client(fake, stream=True)
    reply = llm.complete([], [])
    assert fake.requests[0]["body"]["stream"] is True
    assert [(c.id, c.name) for c in reply.tool_calls] == [("call_abc123", "get_current_weather")]
    assert (reply.finish_reason, reply.usage.prompt_tokens) == ("tool_calls", 82)
    assert llm.complete([], []).refusal == "I'm sorry, I cannot assist with that request."
