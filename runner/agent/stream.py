"""Chat completions as the SDK gives them, made into one ``Message``: streamed chunks assembled
(text, reasoning, refusal and tool-call deltas, the usage chunk), whole responses read.

Reasoning comes as ``reasoning_content`` (DeepSeek, vLLM, llama.cpp) or ``reasoning``
(OpenRouter, Ollama); content may come as a list of parts; both are kept on the ``Message``.
Cached prompt tokens are ``usage.prompt_tokens_details.cached_tokens``.
Nothing here imports the SDK: its objects are read by attribute.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from runner.agent.types import Message, ToolCall, Usage
from runner.errors import ModelError

Emit = Callable[[str, dict[str, Any]], None]
TEXT_EVENT_SECONDS = 0.1  # streamed text reaches the run's events at most this often
PARTIAL_CHARS = 20_000  # a cut stream's partial text kept in its event


class Progress(Protocol):
    def progress(self) -> None: ...

    def end(self) -> float | None: ...


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
    so ``runner runs logs --follow`` shows the answer as it arrives without a row per token.
    The tail is not flushed: the ``response`` event that follows has the whole text."""

    def __init__(self, emit: Emit, interval: float = TEXT_EVENT_SECONDS):
        self.emit, self.interval = emit, interval
        self.last = time.monotonic()
        self.text: list[str] = []
        self.reasoning: list[str] = []

    def add(self, text: str, reasoning: str) -> None:
        if text:
            self.text.append(text)
        if reasoning:
            self.reasoning.append(reasoning)
        now = time.monotonic()
        if now - self.last >= self.interval and (self.text or self.reasoning):
            payload = {"text": "".join(self.text)}
            if self.reasoning:
                payload["reasoning"] = "".join(self.reasoning)
            self.emit("stream_text", payload)
            self.text, self.reasoning, self.last = [], [], now


@dataclass
class Assembly:
    """The deltas of one streamed answer, put together."""

    provider: str
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish: str | None = None
    usage: Usage = field(default_factory=Usage)
    model: str | None = None

    def read(self, chunks: Iterable[Any], *, clock: Progress, events: TextEvents) -> None:
        """Consume the stream; a connection error mid-way raises ``StreamCut`` with the partial text."""
        import openai

        try:
            for chunk in chunks:
                clock.progress()
                text, thought = self.add(chunk)
                events.add(text, thought)
                end = clock.end()
                if end is not None and time.monotonic() > end:
                    raise StreamCut("the call's time ran out mid-stream", "".join(self.content), "".join(self.reasoning))
        except openai.APIConnectionError as exc:
            kind = "timeout" if isinstance(exc, openai.APITimeoutError) else "connection error"
            raise StreamCut(f"{kind}: {exc.__cause__ or exc}", "".join(self.content), "".join(self.reasoning)) from exc
        if self.finish is None:
            raise StreamCut("the stream ended without a finish reason", "".join(self.content), "".join(self.reasoning))

    def add(self, chunk: Any) -> tuple[str, str]:
        """One chunk; returns the text and reasoning it added."""
        self.model = getattr(chunk, "model", None) or self.model
        if getattr(chunk, "usage", None) is not None:
            self.usage = read_usage(chunk.usage)
        text = thought = ""
        for choice in getattr(chunk, "choices", None) or []:
            if getattr(choice, "index", 0) != 0:
                continue
            delta = choice.delta
            text = getattr(delta, "content", None) or ""
            thought = reasoning_of(delta) or ""
            if text:
                self.content.append(text)
            if thought:
                self.reasoning.append(thought)
            if getattr(delta, "refusal", None):
                self.refusal.append(delta.refusal)
            for call in getattr(delta, "tool_calls", None) or []:
                self._call_delta(call)
            if choice.finish_reason:
                self.finish = choice.finish_reason
        return text, thought

    def _call_delta(self, call: Any) -> None:
        index = call.index if getattr(call, "index", None) is not None else len(self.calls)
        slot = self.calls.setdefault(index, {"id": None, "name": "", "arguments": []})
        if getattr(call, "id", None):
            slot["id"] = call.id
        function = getattr(call, "function", None)
        if function is not None:
            if getattr(function, "name", None):
                slot["name"] += function.name
            if getattr(function, "arguments", None):
                slot["arguments"].append(function.arguments)

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
