"""The native Anthropic provider (runner/agent/anthropic.py) against a real HTTP server speaking the
Messages API (tests/fakeanthropic.py): the request it sends (system, tool_use /
tool_result, cache_control breakpoints, x-api-key), streamed and whole answers, thinking blocks
echoed with their signatures, cache reads and writes counted and priced, errors through the
retry loop and the key pool, and `runner run-job` end to end with a cassette."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from runner.agent.anthropic import AnthropicClient, convert_messages
from runner.agent.keys import Credential, StaticKeys
from runner.agent.loop import Pricing
from runner.agent.profiles import retry_after
from runner.agent.types import Message, Usage
from runner.config.machine import Provider
from runner.errors import ModelError
from runner.events import encode
from runner.run.model_choice import ModelChoice, build_client
from tests.agent.test_limits import kinds, last_run
from tests.fakeanthropic import FakeAnthropic, Reply, error, signature_of, text, thinking, tool

KEY = "sk-ant-test-0123456789abcdef"
SYSTEM = "You are a careful operator. " * 200  # ~1,400 tokens: above the cache minimum
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The {name} tool.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    }
    for name in ("read_file", "write_file", "terminal")
]


@pytest.fixture
def claude() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic().start()
    yield server
    server.stop()


def client(server: FakeAnthropic, *, stream: bool = True, keys: Any = None, **kw: Any) -> tuple[AnthropicClient, list]:
    seen: list[tuple[str, dict[str, Any]]] = []
    llm = AnthropicClient(
        base_url=server.base_url,
        model="claude-sonnet-4-5",
        keys=keys or StaticKeys(Credential("ANTHROPIC_API_KEY", KEY)),
        stream=stream,
        emit=lambda kind, payload: seen.append((kind, encode(payload))),
        sleep=lambda seconds: seen.append(("slept", {"s": seconds})),
        **kw,
    )
    return llm, seen


def conversation() -> list[dict[str, Any]]:
    """A turn with two tool calls answered, then a user note: the shapes to convert."""
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "look at a and b"},
        {
            "role": "assistant",
            "content": "Reading both.",
            "reasoning": "kept in the transcript only",
            "tool_calls": [
                {"id": "toolu_a", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a"}'}},
                {"id": "toolu_b", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "b"}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_a", "content": "A"},
        {"role": "tool", "tool_call_id": "toolu_b", "content": "B"},
        {"role": "user", "content": "now answer"},
    ]


def breakpoints(body: dict[str, Any]) -> list[str]:
    """Where the request's cache_control markers are: tools[i], system[i], messages[i].content[j]."""
    out = [f"tools[{i}]" for i, t in enumerate(body.get("tools") or []) if "cache_control" in t]
    out += [f"system[{i}]" for i, b in enumerate(body.get("system") or []) if "cache_control" in b]
    for i, m in enumerate(body["messages"]):
        out += [f"messages[{i}].content[{j}]" for j, b in enumerate(m["content"]) if "cache_control" in b]
    return out


def test_the_request_system_tool_use_tool_result_breakpoints_and_headers(claude):
    claude.add(text("done"))
    llm, _ = client(claude)
    messages = conversation()
    before = json.dumps(messages)
    assert llm.complete(messages, TOOLS).content == "done"
    assert json.dumps(messages) == before  # the caller's conversation is not touched
    sent = claude.requests[0]
    body = sent["body"]
    assert sent["path"] == "/v1/messages"
    assert body["system"] == [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    assert body["tools"][0] == {
        "name": "read_file",
        "description": "The read_file tool.",
        "input_schema": TOOLS[0]["function"]["parameters"],
    }
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][1]["content"] == [
        {"type": "text", "text": "Reading both."},
        {"type": "tool_use", "id": "toolu_a", "name": "read_file", "input": {"path": "a"}},
        {"type": "tool_use", "id": "toolu_b", "name": "read_file", "input": {"path": "b"}},
    ]
    # both tool results and the user's note: one user message, results first
    assert body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_a", "content": "A"},
        {"type": "tool_result", "tool_use_id": "toolu_b", "content": "B"},
        {"type": "text", "text": "now answer", "cache_control": {"type": "ephemeral"}},
    ]
    assert breakpoints(body) == ["tools[2]", "system[0]", "messages[2].content[2]"]
    assert body["max_tokens"] == 8192 and body["stream"] is True and "reasoning" not in json.dumps(body)
    headers = sent["headers"]
    assert headers["x-api-key"] == KEY and headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in headers


def test_cache_false_sends_no_breakpoints_and_options_map(claude):
    from runner.config.model_options import ModelOptions

    claude.add(text("done"))
    options = ModelOptions(temperature=0.2, max_tokens=500, seed=7, extra_body={"metadata": {"user_id": "u1"}})
    llm, _ = client(claude, cache=False, options=options)
    llm.complete(conversation(), TOOLS)
    body = claude.requests[0]["body"]
    assert breakpoints(body) == []
    assert (body["max_tokens"], body["temperature"], body["metadata"]) == (500, 0.2, {"user_id": "u1"})
    assert "seed" not in body  # a chat-completions option the Messages API does not take


@pytest.mark.parametrize("stream", [True, False])
def test_answers_with_tool_calls_streamed_and_whole(claude, stream):
    claude.add(tool("read_file", {"path": "a"}, ("terminal", {"path": "ls"}), say="Looking."), text("all done"))
    llm, _ = client(claude, stream=stream)
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "go"}]
    reply = llm.complete(messages, TOOLS)
    assert claude.requests[0]["stream"] is stream
    assert (reply.content, reply.finish_reason) == ("Looking.", "tool_calls")
    assert [(c.name, json.loads(c.arguments)) for c in reply.tool_calls] == [
        ("read_file", {"path": "a"}),
        ("terminal", {"path": "ls"}),
    ]
    assert all(c.id.startswith("toolu_") for c in reply.tool_calls)
    messages.append(reply.to_dict())
    messages += [{"role": "tool", "tool_call_id": c.id, "content": "ok"} for c in reply.tool_calls]
    final = llm.complete(messages, TOOLS)  # the fake checks every tool_use got its tool_result
    assert (final.content, final.finish_reason, final.tool_calls) == ("all done", "stop", ())


def test_a_long_stream_sends_coalesced_stream_text_events(claude):
    claude.add(Reply(text="x" * 4000, chunk=200, delay=0.03))
    llm, seen = client(claude)
    assert llm.complete([{"role": "user", "content": "go"}], []).content == "x" * 4000
    streamed = "".join(p["text"] for k, p in seen if k == "stream_text")
    assert streamed and ("x" * 4000).startswith(streamed)


@pytest.mark.parametrize("stream", [True, False])
def test_thinking_blocks_go_back_with_their_signature(claude, stream):
    claude.add(thinking("the file first", tool("read_file", {"path": "a"})), text("done"))
    llm, _ = client(claude, stream=stream)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    reply = llm.complete(messages, TOOLS)
    assert reply.reasoning == "the file first"
    assert reply.thinking_blocks == (
        {"type": "thinking", "thinking": "the file first", "signature": signature_of("the file first")},
    )
    turn = reply.to_dict()
    assert turn["anthropic_thinking"] == [dict(b) for b in reply.thinking_blocks]
    messages += [turn, {"role": "tool", "tool_call_id": reply.tool_calls[0].id, "content": "A"}]
    assert llm.complete(messages, TOOLS).content == "done"  # the fake rejects a missing or changed signature
    assistant = claude.requests[1]["body"]["messages"][1]["content"]
    assert assistant[0] == {
        "type": "thinking",
        "thinking": "the file first",
        "signature": signature_of("the file first"),
    }
    assert assistant[1]["type"] == "tool_use"


def test_a_thinking_block_without_its_signature_is_refused_by_the_server(claude):
    claude.add(text("never"))
    llm, _ = client(claude)
    turn = {
        "role": "assistant",
        "content": "x",
        "anthropic_thinking": [{"type": "thinking", "thinking": "t", "signature": "forged"}],
    }
    with pytest.raises(ModelError) as info:
        llm.complete([{"role": "user", "content": "a"}, turn, {"role": "user", "content": "b"}], [])
    assert info.value.status == 400 and "Invalid `signature`" in str(info.value)


def test_cache_reads_and_writes_are_counted_and_priced(claude):
    claude.add(tool("read_file", {"path": "a"}), tool("read_file", {"path": "b"}), text("done"))
    llm, _ = client(claude)
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "go"}]
    usages = []
    for _ in range(3):
        reply = llm.complete(messages, TOOLS)
        usages.append(reply.usage)
        messages.append(reply.to_dict())
        messages += [{"role": "tool", "tool_call_id": c.id, "content": "R" * 400} for c in reply.tool_calls]
    served = [r["usage"] for r in claude.requests]
    for usage, wire in zip(usages, served, strict=True):
        assert usage.prompt_tokens == sum(wire.values())
        assert (usage.cached_tokens, usage.cache_write_tokens) == (
            wire["cache_read_input_tokens"],
            wire["cache_creation_input_tokens"],
        )
    assert usages[0].cached_tokens == 0 and usages[0].cache_write_tokens > 1000  # the frozen prefix written
    assert usages[1].cached_tokens == usages[0].cache_write_tokens  # ...and read back on the next turn
    assert usages[2].cached_tokens == usages[1].cached_tokens + usages[1].cache_write_tokens
    choice = ModelChoice(
        "claude",
        Provider(profile="anthropic", pricing={"input_per_mtok": 3.0, "output_per_mtok": 15.0}),
        "claude-sonnet-4-5",
    )
    pricing = choice.pricing
    assert (pricing.cached_input_per_mtok, pricing.cache_write_per_mtok) == (pytest.approx(0.3), pytest.approx(3.75))
    u = usages[1]
    fresh = u.prompt_tokens - u.cached_tokens - u.cache_write_tokens
    expected = (fresh * 3.0 + u.cached_tokens * 0.3 + u.cache_write_tokens * 3.75 + u.completion_tokens * 15.0) / 1e6
    assert pricing.cost(u) == pytest.approx(expected)


def test_pricing_of_other_providers_is_unchanged():
    usage = Usage(1000, 100, 400)
    assert Pricing(2.0, 8.0, 0.5).cost(usage) == pytest.approx((600 * 2.0 + 400 * 0.5 + 100 * 8.0) / 1e6)
    assert Pricing(2.0, 8.0).cost(usage) == pytest.approx((1000 * 2.0 + 100 * 8.0) / 1e6)
    openai = ModelChoice("o", Provider(pricing={"input_per_mtok": 2.0}), "gpt-4.1-mini").pricing
    assert (openai.cached_input_per_mtok, openai.cache_write_per_mtok) == (None, None)
    set_ = ModelChoice(
        "c", Provider(profile="anthropic", pricing={"input_per_mtok": 3.0, "cached_input_per_mtok": 0.5}), "m"
    ).pricing
    assert set_.cached_input_per_mtok == 0.5  # a price set in config.yaml wins


def test_build_client_picks_the_native_client_by_profile_or_base_url():
    from runner.agent.llm import ChatClient

    def built(**provider: Any) -> Any:
        return build_client(ModelChoice("p", Provider(**provider), "m"), StaticKeys(None), emit=lambda k, p: None)

    assert type(built(base_url="https://api.anthropic.com")) is AnthropicClient
    assert type(built(base_url="http://127.0.0.1:9/", profile="anthropic", cache=False)).__name__ == "AnthropicClient"
    assert built(base_url="http://127.0.0.1:9/", profile="anthropic", cache=False).cache is False
    assert type(built(base_url="https://api.openai.com/v1")) is ChatClient


@pytest.mark.parametrize(
    ("stop", "finish"),
    [("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "length"), ("pause_turn", "stop")],
)
def test_stop_reasons(claude, stop, finish):
    claude.add(Reply(text="partial", stop_reason=stop))
    llm, seen = client(claude)
    reply = llm.complete([{"role": "user", "content": "go"}], [])
    assert (reply.content, reply.finish_reason) == ("partial", finish)
    assert [p["stop_reason"] for k, p in seen if k == "model_note"] == (["pause_turn"] if stop == "pause_turn" else [])


def test_a_refusal(claude):
    claude.add(Reply(text="I can't help with that.", stop_reason="refusal"))
    llm, _ = client(claude, stream=False)
    reply = llm.complete([{"role": "user", "content": "go"}], [])
    assert (reply.content, reply.refusal, reply.finish_reason) == (None, "I can't help with that.", "refusal")
    assert reply.answer == "I can't help with that."


def test_400_invalid_request_fails_at_once_with_the_providers_message(claude):
    claude.add(error(400, "invalid_request_error", "messages.0.content: Input should be a valid list"), text("no"))
    llm, seen = client(claude, max_retries=3)
    with pytest.raises(ModelError) as info:
        llm.complete([{"role": "user", "content": "go"}], [])
    assert (info.value.status, info.value.reason) == (400, "model_error")
    assert "messages.0.content: Input should be a valid list" in str(info.value)
    assert len(claude.requests) == 1 and seen == []


def test_529_overloaded_is_retried(claude):
    claude.add(error(529, "overloaded_error", "Overloaded"), text("ok"))
    llm, seen = client(claude, retry_backoff=0.0)
    assert llm.complete([{"role": "user", "content": "go"}], []).content == "ok"
    [retry] = [p for k, p in seen if k == "model_retry"]
    assert "HTTP 529: Overloaded" in retry["error"]


def test_an_overloaded_error_event_mid_stream_is_retried(claude):
    claude.add(Reply(text="abcdefghijklmnopqrstuvwxyz", chunk=4, error_after=5), text("ok"))
    llm, seen = client(claude, retry_backoff=0.0)
    assert llm.complete([{"role": "user", "content": "go"}], []).content == "ok"
    [retry] = [p for k, p in seen if k == "model_retry"]
    assert "Overloaded" in retry["error"]


def test_429_waits_as_retry_after_says(claude):
    claude.add(
        error(429, "rate_limit_error", "Number of request tokens has exceeded your rate limit", {"retry-after": "7"})
    )
    claude.add(text("ok"))
    llm, seen = client(claude)
    assert llm.complete([{"role": "user", "content": "go"}], []).content == "ok"
    assert ("slept", {"s": 7.0}) in seen


def test_429_with_only_the_ratelimit_reset_times():
    from datetime import UTC, datetime

    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC).timestamp()
    headers = {
        "anthropic-ratelimit-requests-reset": "2025-01-01T12:00:05Z",
        "anthropic-ratelimit-tokens-reset": "2025-01-01T12:00:20Z",
        "anthropic-ratelimit-tokens-remaining": "0",
    }
    assert retry_after(headers, "", now) == 20.0  # the window that ran out
    assert retry_after({"anthropic-ratelimit-tokens-reset": "soon"}, "", now) is None


def test_a_reset_time_becomes_the_retry_wait(claude):
    from datetime import UTC, datetime, timedelta

    when = (datetime.now(UTC) + timedelta(seconds=30)).isoformat().replace("+00:00", "Z")
    claude.add(error(429, "rate_limit_error", "slow down", {"anthropic-ratelimit-tokens-reset": when}), text("ok"))
    llm, seen = client(claude)
    assert llm.complete([{"role": "user", "content": "go"}], []).content == "ok"
    [retry] = [p for k, p in seen if k == "model_retry"]
    assert 25 <= retry["wait_s"] <= 30


def test_conversion_merges_roles_and_opens_with_the_user():
    out = convert_messages(
        [
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "a"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "b"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "t1", "function": {"name": "x", "arguments": "not json"}}],
            },
        ],
        cache=False,
    )
    assert [m["role"] for m in out] == ["user", "assistant", "user", "assistant"]
    assert out[2]["content"] == [
        {"type": "text", "text": "a"},
        {"type": "text", "text": "b"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
    ]
    assert out[3]["content"] == [{"type": "tool_use", "id": "t1", "name": "x", "input": {"arguments": "not json"}}]


def test_a_turn_round_trips_through_the_cassette_form():
    turn = Message(
        content="hi",
        finish_reason="stop",
        usage=Usage(1500, 20, 1200, 250),
        reasoning="thought",
        thinking_blocks=({"type": "thinking", "thinking": "thought", "signature": "sig"},),
    )
    again = Message.from_record(yaml.safe_load(yaml.safe_dump(turn.to_record())))
    assert (again.usage, again.thinking_blocks, again.reasoning) == (turn.usage, turn.thinking_blocks, "thought")


# -- end to end: runner run-job with profile: anthropic -----------------------------------------------

KEYS = ["ant-key-one-q7w8e9r0t1y2", "ant-key-two-z9x8c7v6b5n4"]


def anthropic_config(project, server: FakeAnthropic) -> dict[str, str]:
    project.home.mkdir(parents=True, exist_ok=True)
    (project.home / "config.yaml").write_text(
        "providers:\n"
        "  default:\n"
        "    profile: anthropic\n"
        f"    base_url: {server.base_url}\n"
        "    model: claude-sonnet-4-5\n"
        "    api_keys: [env:ANT_KEY_0, env:ANT_KEY_1]\n"
        "    retry_backoff: 0\n"
        "    pricing: {input_per_mtok: 3.0, output_per_mtok: 15.0}\n"
    )
    env = project.env(ANT_KEY_0=KEYS[0], ANT_KEY_1=KEYS[1])
    env.pop("OPENAI_API_KEY")
    return env


def test_run_job_two_turns_with_tools_a_401_rotation_then_a_cassette_replay(project, claude):
    env = anthropic_config(project, claude)
    claude.min_cache_tokens = 0
    claude.add(
        error(401, "authentication_error", "invalid x-api-key", keys=(KEYS[0],)),
        thinking("list it", tool("terminal", {"command": "echo from-claude-tool"})),
        text("the listing said from-claude-tool"),
    )
    project.write_jobs("jobs:\n  ant:\n    prompt: run the echo\n    toolsets: [terminal]\n")
    cassette = project.root / "ant.yaml"
    res = project.cli("run-job", "ant", "--record", str(cassette), env=env)
    assert res.exit_code == 0, res.output
    assert claude.keys_used() == [KEYS[0], KEYS[1], KEYS[1]]  # the 401 moved the pool to the other key
    assert all("authorization" not in r["headers"] for r in claude.requests)
    run = last_run(project)
    assert run["status"] == "succeeded", run
    events = kinds(project, run["id"])
    assert any(k == "tool_result" and "from-claude-tool" in p["result"] for k, p in events)
    responses = [p for k, p in events if k == "response"]
    assert responses[0]["reasoning"] == "list it"
    second = claude.requests[2]["body"]
    assert second["messages"][1]["content"][0]["signature"] == signature_of("list it")
    assert responses[1]["cached_tokens"] == claude.requests[2]["usage"]["cache_read_input_tokens"] > 0
    assert "credential_rotated" in [k for k, _ in events]

    turns = yaml.safe_load(cassette.read_text())["turns"]
    assert turns[0]["anthropic_thinking"][0]["signature"] == signature_of("list it")
    assert turns[1]["usage"]["cached_tokens"] == responses[1]["cached_tokens"]
    served = len(claude.requests)
    res = project.cli("run-job", "ant", "--replay", str(cassette), env=env)
    assert res.exit_code == 0, res.output
    assert len(claude.requests) == served  # the replay never reached the server
    replayed = kinds(project, last_run(project)["id"])
    assert any(k == "tool_result" and "from-claude-tool" in p["result"] for k, p in replayed)
    assert [p["content"] for k, p in replayed if k == "response"][-1] == "the listing said from-claude-tool"
