"""The native Anthropic client: the Messages API on the anthropic SDK, with prompt caching.

``AnthropicClient`` is a ``ChatClient`` (runner/agent/llm.py): the same retries, backoff, key
seam (the credential pool sees every status and header), clock and events; only the request and
the answer differ. The SDK is imported at the first request (``_sdk``), made with
``max_retries=0``: every retry is ours.

- The conversation (runner keeps it in chat-completions shape: ``system``, ``user``,
  ``assistant`` with ``tool_calls``, ``tool``) becomes the Messages API's: the system prompt
  apart, ``tool_use`` and ``tool_result`` blocks, consecutive messages of one role merged into
  one (so a turn's tool results are one user message). An assistant turn's thinking blocks
  (``Message.thinking_blocks``, kept in the conversation under ``anthropic_thinking``) go back
  verbatim with their signatures, ahead of its text and tool calls.
- Prompt caching (``cache: true``, the default): ``cache_control: {"type": "ephemeral"}`` on the
  last tool definition and the system prompt's last block (the frozen prefix: the API caches
  tools, then system, then messages), and on the last block of the last message, so each turn
  reads the conversation so far from the cache and writes only what is new (3 breakpoints of
  the 4 the API allows).
- Answers are read as JSON from the raw HTTP response (streamed server-sent events or a whole
  message): no SDK types are built. Usage: ``prompt_tokens`` = input + cache writes + cache
  reads, ``cached_tokens`` = cache reads, ``cache_write_tokens`` = cache writes.
- ``stop_reason``: ``end_turn`` / ``stop_sequence`` -> ``stop``, ``tool_use`` -> ``tool_calls``,
  ``max_tokens`` / ``model_context_window_exceeded`` -> ``length``, ``refusal`` -> ``refusal``
  (the text is the turn's ``refusal``), ``pause_turn`` -> ``stop`` with a ``model_note`` event.
- The key goes in ``x-api-key`` (never ``Authorization``), with ``anthropic-version``.
  Rate-limit resets come as ``retry-after`` seconds or ``anthropic-ratelimit-*-reset`` RFC 3339
  times; the latter become a ``retry-after`` for the retry logic and the pool.
- ``max_tokens`` is required: the options' (or the call's), else the model's default output cap.
  Thinking is asked for with ``model_options.extra_body: {thinking: {...}}``; ``seed``,
  ``reasoning_effort`` and ``response_format`` are chat-completions options and are not sent.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runner.agent.keys import Credential
from runner.agent.llm import ChatClient, Failure, _Clock, _status_failure
from runner.agent.stream import DONE, TICK, BadChunk, Progress, StreamCut, StreamError, TextEvents, sse_events
from runner.agent.types import THINKING_KEY, Message, ToolCall, Usage
from runner.errors import ConfigError, ModelError
from runner.events import Event, ModelNote
from runner.host.tls import verify_for

ANTHROPIC_VERSION = "2023-06-01"
CACHE = {"type": "ephemeral"}
DEFAULT_MAX_TOKENS = 8192
# the output caps of models whose cap is below the default (docs.anthropic.com, models overview)
MAX_TOKENS_BY_PREFIX = (("claude-3-haiku", 4096), ("claude-3-opus", 4096), ("claude-3-sonnet", 4096))
FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "refusal",
}
THINKING_TYPES = frozenset({"thinking", "redacted_thinking"})
SDK_ARGUMENTS = frozenset({"max_tokens", "stream", "tools"})
REFUSED = "the model declined to answer (stop_reason: refusal)"


def default_max_tokens(model: str) -> int:
    name = model.rpartition("/")[2].lower()
    for prefix, cap in MAX_TOKENS_BY_PREFIX:
        if name.startswith(prefix):
            return cap
    return DEFAULT_MAX_TOKENS


def native_base_url(base_url: str) -> str:
    """The SDK's base URL (it adds ``/v1/messages``): a configured ``.../v1`` loses its ``/v1``."""
    url = base_url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


# -- the request ---------------------------------------------------------------------------------


def convert_tools(tools: Sequence[dict[str, Any]], *, cache: bool) -> list[dict[str, Any]]:
    """Chat-completions tool schemas as the Messages API's (``input_schema``); the last one
    carries the tools' cache breakpoint."""
    out = []
    for tool in tools:
        fn = tool.get("function") or tool
        item: dict[str, Any] = {"name": fn["name"]}
        if fn.get("description"):
            item["description"] = fn["description"]
        item["input_schema"] = fn.get("parameters") or {"type": "object", "properties": {}}
        out.append(item)
    if cache and out:
        out[-1] = {**out[-1], "cache_control": CACHE}
    return out


def convert_messages(messages: Sequence[Mapping[str, Any]], *, cache: bool) -> list[dict[str, Any]]:
    """The conversation in Messages API form. The system prompt (the leading system messages)
    comes first as ``{"role": "system", "content": [text blocks]}`` for ``_attempt`` to take
    apart; a system message later in the conversation becomes user text."""
    system: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        if role == "system" and not out:
            system += [{"type": "text", "text": t} for t in [_text(m.get("content"))] if t]
            continue
        if role == "assistant":
            blocks = _assistant_blocks(m)
        elif role == "tool":
            blocks = [_tool_result(m)]
        else:
            blocks = _user_blocks(m.get("content"))
            if role == "system":
                blocks = [{"type": "text", "text": f"[system] {_text(m.get('content'))}"}]
        wire_role = "assistant" if role == "assistant" else "user"
        if out and out[-1]["role"] == wire_role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": wire_role, "content": blocks})
    if out and out[0]["role"] == "assistant":  # the API takes a conversation that opens with the user
        out.insert(0, {"role": "user", "content": [{"type": "text", "text": "(continue)"}]})
    for m in out:
        if not m["content"]:
            m["content"] = [{"type": "text", "text": "(empty)"}]
    if cache:
        if system:
            system[-1] = {**system[-1], "cache_control": CACHE}
        _mark_last(out)
    return ([{"role": "system", "content": system}] if system else []) + out


def _mark_last(messages: list[dict[str, Any]]) -> None:
    """A cache breakpoint on the last block of the last message that can carry one (not a
    thinking block)."""
    if not messages:
        return
    blocks = messages[-1]["content"]
    for i in range(len(blocks) - 1, -1, -1):
        if blocks[i].get("type") not in THINKING_TYPES:
            blocks[i] = {**blocks[i], "cache_control": CACHE}
            return


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)


def _user_blocks(content: Any) -> list[dict[str, Any]]:
    if not isinstance(content, list):
        text = _text(content)
        return [{"type": "text", "text": text}] if text else []
    blocks: list[dict[str, Any]] = []
    for part in content:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "text" and part.get("text"):
            blocks.append({"type": "text", "text": str(part["text"])})
        elif kind == "image_url":
            url = str((part.get("image_url") or {}).get("url", ""))
            if url.startswith("data:") and ";base64," in url:
                media, _, data = url[5:].partition(";base64,")
                blocks.append({"type": "image", "source": {"type": "base64", "media_type": media, "data": data}})
            elif url:
                blocks.append({"type": "image", "source": {"type": "url", "url": url}})
        elif kind in ("image", "document", "tool_result", "tool_use"):  # already Anthropic's own
            blocks.append(dict(part))
    return blocks


def _assistant_blocks(m: Mapping[str, Any]) -> list[dict[str, Any]]:
    blocks = [dict(b) for b in m.get(THINKING_KEY) or () if isinstance(b, dict)]
    text = _text(m.get("content"))
    if text:
        blocks.append({"type": "text", "text": text})
    for call in m.get("tool_calls") or ():
        fn = call.get("function") or {}
        blocks.append(
            {"type": "tool_use", "id": call.get("id"), "name": fn.get("name"), "input": _input(fn.get("arguments"))}
        )
    return blocks


def _input(arguments: Any) -> dict[str, Any]:
    """A tool call's arguments as the object ``tool_use.input`` must be."""
    if isinstance(arguments, dict):
        return arguments
    try:
        value = json.loads(arguments or "{}")
    except (TypeError, ValueError):
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"arguments": value}


def _tool_result(m: Mapping[str, Any]) -> dict[str, Any]:
    content = m.get("content")
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": m.get("tool_call_id")}
    if isinstance(content, list):
        block["content"] = _user_blocks(content)
    else:
        block["content"] = _text(content)
    return block


# -- the answer ----------------------------------------------------------------------------------


@dataclass
class Reader:
    """One answer put together from the Messages API's stream events (or a whole message), read
    as plain JSON: content blocks by index, the stop reason, the usage (cumulative: the last
    value of each field wins)."""

    provider: str
    blocks: dict[int, dict[str, Any]] = field(default_factory=dict)
    texts: dict[int, list[str]] = field(default_factory=dict)
    stop: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    model: str | None = None
    explanation: str = ""

    def read(self, events: Iterable[dict[str, Any]], *, clock: Progress, text_events: TextEvents) -> None:
        for event in events:
            now = time.monotonic()
            if clock.deadline is not None and now > clock.deadline:
                raise self.cut("the call's time ran out mid-stream")
            if event is TICK:  # bytes with no event (a keep-alive): only the clocks move
                if clock.idle_over(now):
                    raise self.cut("the stream sent nothing but keep-alives for the idle timeout")
                continue
            if event is DONE:
                break
            clock.progress(now)
            kind = event.get("type")
            if kind == "error":  # an error sent inside the stream: overloaded_error is retried, a bad request is not
                raise StreamError(event)
            text, thought = self.add(event)
            if text or thought:
                text_events.add(text, thought, now)
            if kind == "message_stop":
                break
        if self.stop is None:
            raise self.cut("the stream ended without a stop reason")

    def cut(self, error: str) -> StreamCut:
        text = "".join(t for i, t in self._joined() if self.blocks[i].get("type") == "text")
        thought = "".join(t for i, t in self._joined() if self.blocks[i].get("type") == "thinking")
        return StreamCut(error, text, thought)

    def _joined(self) -> list[tuple[int, str]]:
        return [(i, "".join(self.texts.get(i, ()))) for i in sorted(self.blocks)]

    def add(self, event: dict[str, Any]) -> tuple[str, str]:
        """One stream event; returns the text and thinking it added."""
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message") or {}
            self.model = message.get("model") or self.model
            self._usage(message.get("usage"))
            for i, block in enumerate(message.get("content") or ()):
                self._start(i, block)
        elif kind == "content_block_start":
            self._start(int(event.get("index", len(self.blocks))), event.get("content_block") or {})
        elif kind == "content_block_delta":
            return self._delta(int(event.get("index", 0)), event.get("delta") or {})
        elif kind == "message_delta":
            delta = event.get("delta") or {}
            self.stop = delta.get("stop_reason") or self.stop
            details = delta.get("stop_details")
            if isinstance(details, dict) and details.get("explanation"):
                self.explanation = str(details["explanation"])  # a streaming classifier's refusal
            self._usage(event.get("usage"))
        # content_block_stop, message_stop, ping and unknown events carry nothing to keep
        return "", ""

    def whole(self, message: dict[str, Any]) -> None:
        """A whole (not streamed) message."""
        if message.get("type") == "error" or "error" in message:
            raise StreamError(message)
        if message.get("type") != "message" and "content" not in message:
            raise BadChunk("an answer that is not a Messages API message", json.dumps(message)[:400])
        self.model = message.get("model")
        self._usage(message.get("usage"))
        for i, block in enumerate(message.get("content") or ()):
            self._start(i, block)
        self.stop = message.get("stop_reason") or "end_turn"

    def _start(self, index: int, block: dict[str, Any]) -> None:
        block = dict(block)
        kind = block.get("type")
        self.blocks[index] = block
        if kind == "text":
            self.texts[index] = [str(block.get("text") or "")]
        elif kind == "thinking":
            self.texts[index] = [str(block.get("thinking") or "")]
        elif kind == "tool_use":
            initial = block.get("input")
            self.texts[index] = [json.dumps(initial)] if initial else []

    def _delta(self, index: int, delta: dict[str, Any]) -> tuple[str, str]:
        block = self.blocks.setdefault(index, {"type": "text", "text": ""})
        pieces = self.texts.setdefault(index, [])
        kind = delta.get("type")
        if kind == "text_delta":
            text = str(delta.get("text") or "")
            pieces.append(text)
            return text, ""
        if kind == "thinking_delta":
            thought = str(delta.get("thinking") or "")
            pieces.append(thought)
            return "", thought
        if kind == "input_json_delta":
            pieces.append(str(delta.get("partial_json") or ""))
        elif kind == "signature_delta":
            block["signature"] = str(block.get("signature") or "") + str(delta.get("signature") or "")
        return "", ""

    def _usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            for key in ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
                if isinstance(usage.get(key), int):
                    self.usage[key] = usage[key]

    def message(self) -> Message:
        texts: list[str] = []
        thoughts: list[str] = []
        thinking: list[dict[str, Any]] = []
        calls: list[ToolCall] = []
        for i in sorted(self.blocks):
            block, joined = self.blocks[i], "".join(self.texts.get(i, ()))
            kind = block.get("type")
            if kind == "text":
                texts.append(joined)
            elif kind == "thinking":
                thoughts.append(joined)
                thinking.append({"type": "thinking", "thinking": joined, "signature": block.get("signature", "")})
            elif kind == "redacted_thinking":
                thinking.append({"type": "redacted_thinking", "data": block.get("data", "")})
            elif kind == "tool_use":
                calls.append(
                    ToolCall(str(block.get("id") or f"toolu_{i}"), str(block.get("name") or ""), joined or "{}")
                )
        u = self.usage
        written, read = u.get("cache_creation_input_tokens", 0), u.get("cache_read_input_tokens", 0)
        usage = Usage(u.get("input_tokens", 0) + written + read, u.get("output_tokens", 0), read, written)
        text = "".join(texts)
        refused = self.stop == "refusal"
        return Message(
            content=None if refused or (not texts and calls) else text,
            tool_calls=tuple(calls),
            finish_reason=FINISH.get(self.stop or "", self.stop),
            usage=usage,
            model=self.model,
            reasoning="".join(thoughts) or None,
            refusal=(self.explanation or text or REFUSED) if refused else None,
            thinking_blocks=tuple(thinking),
        )


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        return f"{error.get('type', 'error')}: {error.get('message', '')}"[:300]
    return str(error)[:300]


# -- the client ----------------------------------------------------------------------------------


class AnthropicClient(ChatClient):
    """``ChatClient`` speaking Anthropic's Messages API (``profile: anthropic``)."""

    def __init__(self, *, cache: bool = True, **kwargs: Any):
        super().__init__(**kwargs)
        self.cache = cache
        self._anthropic: Any = None

    def close(self) -> None:
        if self._anthropic is not None:
            self._anthropic.close()

    def _sdk(self) -> Any:
        """The anthropic SDK's client, made at the first request."""
        if self._anthropic is None:
            try:
                import anthropic
            except ImportError:
                raise ConfigError(
                    f"provider {self.provider!r} speaks Anthropic's Messages API, which needs the anthropic "
                    "SDK: pip install -e '.[anthropic]' (or pip install anthropic)"
                ) from None

            self._anthropic = anthropic.Anthropic(
                api_key="unused",  # every request sets (or omits) its own x-api-key; never Authorization
                base_url=native_base_url(self.base_url),
                max_retries=0,
                timeout=self.request_timeout,
                default_headers={"anthropic-version": ANTHROPIC_VERSION, **self.headers},
                http_client=anthropic.DefaultHttpxClient(verify=verify_for(self.base_url)),
                open_telemetry=False,  # runner's own spans cover the model call
            )
            _ = self._anthropic.messages  # its resource modules load on first access
        return self._anthropic

    def complete(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        *,
        timeout: float | None = None,
        max_tokens: int | None = None,
    ) -> Message:
        """One model turn: the conversation converted once, then ChatClient's retry loop."""
        converted = convert_messages(messages, cache=self.cache)
        return super().complete(converted, tools, timeout=timeout, max_tokens=max_tokens)

    def request_body(self, tools: Sequence[dict[str, Any]], max_tokens: int | None) -> dict[str, Any]:
        options = self.options
        limit = options.max_tokens or default_max_tokens(self.model)
        if max_tokens is not None:
            limit = min(limit, max_tokens)
            thinking = options.extra_body.get("thinking")
            budget = thinking.get("budget_tokens") if isinstance(thinking, dict) else None
            if isinstance(budget, int) and budget >= limit:  # the API wants max_tokens above the budget
                limit = budget + max_tokens
        body: dict[str, Any] = {"max_tokens": limit}
        for key in ("temperature", "top_p"):
            value = getattr(options, key)
            if value is not None:
                body[key] = value
        if tools:
            body["tools"] = convert_tools(tools, cache=self.cache)
        if self.stream:
            body["stream"] = True
        return body

    def _auth(self, cred: Credential | None) -> dict[str, Any]:
        import anthropic

        headers: dict[str, Any] = dict(self.options.extra_headers)
        headers["Authorization"] = anthropic.Omit()
        if cred is not None:
            headers["X-Api-Key"] = cred.value
        elif not any(k.lower() == "x-api-key" for k in self.headers):
            headers["X-Api-Key"] = anthropic.Omit()  # a local server that takes no key
        return headers

    def _attempt(
        self, messages: list[dict[str, Any]], body: dict[str, Any], cred: Credential | None, clock: _Clock
    ) -> Message | Failure:
        import anthropic

        # the SDK's own arguments; the rest of the body (temperature, top_p, model_options.extra_body) as extra_body
        request = {k: v for k, v in body.items() if k in SDK_ARGUMENTS}
        extra = {**{k: v for k, v in body.items() if k not in SDK_ARGUMENTS}, **self.options.extra_body}
        if messages and messages[0].get("role") == "system":
            request["system"] = messages[0]["content"]
            messages = messages[1:]
        try:
            raw = self._sdk().messages.with_raw_response.create(
                model=self.model,
                messages=messages,
                timeout=clock.limit(self.request_timeout),
                extra_headers=self._auth(cred),
                extra_body=extra or None,
                **request,
            )
            return self._read(raw.http_response, clock)
        except anthropic.APIStatusError as exc:
            return _status_failure(exc)  # reset times of every format: profiles.retry_after
        except anthropic.APITimeoutError as exc:
            return Failure(f"timeout: {type(exc).__name__}")
        except anthropic.APIConnectionError as exc:
            return Failure(f"connection error: {type(exc).__name__}: {exc.__cause__ or exc}")
        except anthropic.AnthropicError as exc:
            raise ModelError(f"{self.provider}: malformed response: {exc}", reason="model_error") from exc

    def _read(self, response: Any, clock: _Clock) -> Message:
        """The answer from the raw HTTP response: server-sent events, or a whole message."""
        import httpx2

        reader = Reader(self.provider)
        try:
            kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
            if kind == "text/event-stream":
                reader.read(sse_events(response.iter_bytes()), clock=clock, text_events=TextEvents(self.emit))
            elif kind in ("application/json", "") or not self.stream:
                body = response.read()
                try:
                    data = json.loads(body)
                except ValueError:
                    raise BadChunk("the answer is not JSON", body[:400].decode("utf-8", "replace")) from None
                if not isinstance(data, dict):
                    raise BadChunk("the answer is not a JSON object", body[:400].decode("utf-8", "replace"))
                reader.whole(data)
            else:
                excerpt = response.read()[:400].decode("utf-8", "replace")
                raise BadChunk(f"HTTP {response.status_code} with content-type {kind!r}", excerpt)
        except (httpx2.HTTPError, httpx2.StreamError) as exc:
            what = "timeout" if isinstance(exc, httpx2.TimeoutException) else "connection error"
            raise reader.cut(f"{what}: {type(exc).__name__}: {exc}") from exc
        finally:
            response.close()
        if reader.stop == "pause_turn":
            self.emit(Event.MODEL_NOTE, ModelNote("pause_turn", "the API paused a long turn; taken as its end"))
        return reader.message()
