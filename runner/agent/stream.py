"""Chat completions as the SDK gives them, made into one ``Message``: streamed chunks assembled
(text, reasoning, refusal and tool-call deltas, the usage chunk), whole responses read.

Reasoning comes as ``reasoning_content`` (DeepSeek, vLLM, llama.cpp) or ``reasoning``
(OpenRouter, Ollama); content may come as a list of parts; both are kept on the ``Message``.
Cached prompt tokens are ``usage.prompt_tokens_details.cached_tokens``.
Nothing here imports the SDK: its whole responses are read by attribute, streamed chunks as JSON.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from runner.agent.types import Message, ToolCall, Usage
from runner.errors import ModelError

Emit = Callable[[str, dict[str, Any]], None]
TEXT_EVENT_SECONDS = 0.1  # streamed text reaches the run's events at most this often
TEXT_EVENT_CHARS = 16_000  # and at most this much of one turn (the response event has it all)
PARTIAL_CHARS = 20_000  # a cut stream's partial text kept in its event


class Progress(Protocol):
    @property
    def deadline(self) -> float | None: ...

    def progress(self, now: float) -> None: ...


class StreamCut(Exception):
    """The stream stopped before its end (a dropped connection, a stall, no finish reason)."""

    def __init__(self, error: str, text: str, reasoning: str):
        super().__init__(error)
        self.error, self.text, self.reasoning = error, text, reasoning

    @property
    def chars(self) -> int:
        return len(self.text)

    def payload(self) -> dict[str, Any]:
        out: dict[str, Any] = {"error": self.error, "chars": self.chars, "partial_text": self.text[-PARTIAL_CHARS:]}
        if self.reasoning:
            out["partial_reasoning"] = self.reasoning[-PARTIAL_CHARS:]
        return out


class TextEvents:
    """Streamed text as ``stream_text`` events, coalesced: at most one per TEXT_EVENT_SECONDS,
    so ``runner runs logs --follow`` shows the answer as it arrives without a row per token, and
    at most TEXT_EVENT_CHARS of a turn, so a huge answer is not stored twice (the last event
    says ``more: true``). The tail is not flushed: the ``response`` event that follows has the
    whole text."""

    def __init__(self, emit: Emit, interval: float = TEXT_EVENT_SECONDS, budget: int = TEXT_EVENT_CHARS):
        self.emit, self.interval, self.budget = emit, interval, budget
        self.last = time.monotonic()
        self.text: list[str] = []
        self.reasoning: list[str] = []

    def add(self, text: str, reasoning: str, now: float) -> None:
        if self.budget <= 0:
            return
        if text:
            self.text.append(text)
        if reasoning:
            self.reasoning.append(reasoning)
        if now - self.last >= self.interval and (self.text or self.reasoning):
            self._flush(now)

    def _flush(self, now: float) -> None:
        payload: dict[str, Any] = {"text": "".join(self.text)[: self.budget]}
        self.budget -= len(payload["text"])
        if self.reasoning and self.budget > 0:
            payload["reasoning"] = "".join(self.reasoning)[: self.budget]
            self.budget -= len(payload["reasoning"])
        if self.budget <= 0:
            payload["more"] = True
        self.emit("stream_text", payload)
        self.text, self.reasoning, self.last = [], [], now


def sse_events(blocks: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    """The JSON objects of a server-sent event stream's ``data:`` fields, up to ``[DONE]``,
    from the body's bytes as they arrive (lines split here: cheaper than a text decoder)."""
    rest = b""
    data: list[bytes] = []
    for block in blocks:
        lines = (rest + block).split(b"\n")
        rest = lines.pop()
        for line in lines:
            line = line.rstrip(b"\r")
            if line.startswith(b"data:"):
                data.append(line[6:] if line.startswith(b"data: ") else line[5:])
            elif not line and data:
                payload, data = b"\n".join(data), []
                if payload.strip() == b"[DONE]":
                    return
                yield _chunk(payload)
            # ``event:``, ``id:``, ``retry:`` and ``:`` comment lines carry nothing we use
    if rest.startswith(b"data:"):
        data.append(rest[5:])
    if data and b"\n".join(data).strip() != b"[DONE]":
        yield _chunk(b"\n".join(data))


def whole_as_chunks(body: bytes) -> list[dict[str, Any]]:
    """A whole chat completion (a server that answers ``stream: true`` with plain JSON) as the
    one chunk it amounts to: each choice's message as its delta."""
    data = _chunk(body)
    choices = []
    for choice in data.get("choices") or ():
        delta = dict(choice.get("message") or {})
        text, parts, refusal = read_content(delta.get("content"))
        delta["content"] = text
        if refusal and not delta.get("refusal"):
            delta["refusal"] = refusal
        for i, call in enumerate(delta.get("tool_calls") or ()):
            call.setdefault("index", i)
        choices.append({**choice, "delta": delta})
    return [{**data, "choices": choices}]


def _chunk(payload: bytes) -> dict[str, Any]:
    try:
        value = json.loads(payload)
    except ValueError as exc:
        raise BadChunk(f"a stream chunk is not JSON: {payload[:200]!r}") from exc
    if not isinstance(value, dict):
        raise BadChunk(f"a stream chunk is not an object: {payload[:200]!r}")
    return value


class BadChunk(ValueError):
    """A streamed event that is not a chat.completion.chunk object."""


@dataclass
class Assembly:
    """The deltas of one streamed answer, put together. Chunks are read as plain JSON: the SDK's
    typed chunks cost about 0.3 ms each to build, 150 ms for a 2 KB answer sent a token at a time."""

    provider: str
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish: str | None = None
    usage: Usage = field(default_factory=Usage)
    model: str | None = None

    def read(self, chunks: Iterable[dict[str, Any]], *, clock: Progress, events: TextEvents) -> None:
        """Consume the stream; a stream that ends early raises ``StreamCut`` with the partial text
        (the caller turns a transport error mid-way into one too, with ``cut``)."""
        for chunk in chunks:
            now = time.monotonic()
            clock.progress(now)
            if "error" in chunk:  # an error sent inside the stream
                raise self.cut(f"the provider sent an error mid-stream: {_error_text(chunk['error'])}")
            text, thought = self.add(chunk)
            if text or thought:
                events.add(text, thought, now)
            if clock.deadline is not None and now > clock.deadline:
                raise self.cut("the call's time ran out mid-stream")
        if self.finish is None:
            raise self.cut("the stream ended without a finish reason")

    def cut(self, error: str) -> StreamCut:
        return StreamCut(error, "".join(self.content), "".join(self.reasoning))

    def add(self, chunk: dict[str, Any]) -> tuple[str, str]:
        """One chunk; returns the text and reasoning it added."""
        self.model = chunk.get("model") or self.model
        if chunk.get("usage"):
            self.usage = usage_of(chunk["usage"])
        text = thought = ""
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            text = delta.get("content") or ""
            thought = delta.get("reasoning_content") or delta.get("reasoning") or ""
            if not isinstance(thought, str):
                thought = json.dumps(thought, ensure_ascii=False)
            if text:
                self.content.append(text)
            if thought:
                self.reasoning.append(thought)
            if delta.get("refusal"):
                self.refusal.append(delta["refusal"])
            for call in delta.get("tool_calls") or ():
                self._call_delta(call)
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
        return text, thought

    def _call_delta(self, call: dict[str, Any]) -> None:
        index = call.get("index")
        slot = self.calls.setdefault(len(self.calls) if index is None else index, {"id": None, "name": "", "arguments": []})
        if call.get("id"):
            slot["id"] = call["id"]
        function = call.get("function") or {}
        if function.get("name"):
            slot["name"] += function["name"]
        if function.get("arguments"):
            slot["arguments"].append(function["arguments"])

    def message(self) -> Message:
        calls = tuple(
            ToolCall(str(slot["id"] or f"call_{i}"), slot["name"], "".join(slot["arguments"]) or "{}")
            for i, slot in sorted(self.calls.items())
        )
        return Message(
            content="".join(self.content) if self.content or not calls else None,
            tool_calls=calls,
            finish_reason=self.finish,
            usage=self.usage,
            model=self.model,
            reasoning="".join(self.reasoning) or None,
            refusal="".join(self.refusal) or None,
        )


def usage_of(usage: dict[str, Any]) -> Usage:
    details = usage.get("prompt_tokens_details") or {}
    return Usage(
        int(usage.get("prompt_tokens") or 0),
        int(usage.get("completion_tokens") or 0),
        int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0,
    )


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error.get("code") or error)[:300]
    return str(error)[:300]


def parse_completion(completion: Any, *, provider: str) -> Message:
    """A whole (not streamed) chat completion."""
    try:
        choice = completion.choices[0]
        msg = choice.message
    except (AttributeError, IndexError, TypeError) as exc:
        raise ModelError(f"{provider}: malformed response: no choices ({exc})", reason="model_error") from exc
    calls = tuple(
        ToolCall(str(getattr(c, "id", None) or f"call_{i}"), str(c.function.name or ""), _args(c.function.arguments))
        for i, c in enumerate(getattr(msg, "tool_calls", None) or [])
    )
    content, parts, part_refusal = read_content(getattr(msg, "content", None))
    return Message(
        content=content,
        tool_calls=calls,
        finish_reason=choice.finish_reason,
        usage=read_usage(getattr(completion, "usage", None)),
        model=getattr(completion, "model", None),
        reasoning=reasoning_of(msg),
        refusal=getattr(msg, "refusal", None) or part_refusal,
        parts=parts,
    )


def read_content(content: Any) -> tuple[str | None, tuple[dict[str, Any], ...], str | None]:
    """(text, parts, refusal) of a message's content: a string, or a list of parts whose text
    parts are joined (``{"type": "text", "text": ...}``; a ``refusal`` part is the refusal)."""
    if content is None or isinstance(content, str):
        return content, (), None
    parts = tuple(_plain(p) for p in content) if isinstance(content, list) else ()
    texts = [str(p.get("text", "")) for p in parts if p.get("type") in ("text", "output_text")]
    refusals = [str(p.get("refusal", "")) for p in parts if p.get("type") == "refusal"]
    return ("".join(texts) if texts else None), parts, ("".join(refusals) or None)


def reasoning_of(obj: Any) -> str | None:
    for name in ("reasoning_content", "reasoning"):
        value = getattr(obj, name, None)
        if value is None and isinstance(getattr(obj, "model_extra", None), dict):
            value = obj.model_extra.get(name)
        if value:
            return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return None


def read_usage(usage: Any) -> Usage:
    if usage is None:
        return Usage()
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    return Usage(int(usage.prompt_tokens or 0), int(usage.completion_tokens or 0), int(cached or 0))


def _plain(part: Any) -> dict[str, Any]:
    if isinstance(part, dict):
        return part
    dump = getattr(part, "model_dump", None)
    return dump(exclude_none=True) if callable(dump) else {"type": "text", "text": str(part)}


def _args(value: Any) -> str:
    if value is None:
        return "{}"
    return value if isinstance(value, str) else json.dumps(value)
