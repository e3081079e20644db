"""Typed values that cross the LLM seam."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

THINKING_KEY = "anthropic_thinking"  # an assistant turn's Anthropic thinking blocks (signed), for the next request


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text exactly as the model sent it
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)  # the provider's own fields, echoed back

    def to_dict(self) -> dict[str, Any]:
        out = {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}
        return {**self.extra, **out} if self.extra else out

    def to_record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "name": self.name, "arguments": self.arguments}
        if self.extra:
            out["extra"] = dict(self.extra)
        return out


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # of prompt_tokens, served from the provider's prompt cache
    cache_write_tokens: int = 0  # of prompt_tokens, written to the prompt cache (Anthropic bills them apart)

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class Message:
    """One assistant turn."""

    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    model: str | None = None
    reasoning: str | None = None  # ``reasoning_content`` / ``reasoning``: kept, never sent back
    refusal: str | None = None
    parts: tuple[dict[str, Any], ...] = ()  # the content as the provider gave it, when in parts
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)  # the provider's own fields of the turn
    usage_estimated: bool = False  # the provider sent no usage: tokens estimated from characters
    # Anthropic's thinking / redacted_thinking blocks as sent (with their signatures): the next
    # request must carry them back unchanged (runner/agent/anthropic.py)
    thinking_blocks: tuple[dict[str, Any], ...] = ()

    @property
    def answer(self) -> str:
        """The text of a final answer: the content, else the refusal."""
        if self.content is not None:
            return self.content
        return self.refusal or ""

    def extras(self) -> dict[str, Any]:
        """Reasoning, refusal and content parts, when present (for events and cassettes)."""
        out: dict[str, Any] = {}
        if self.reasoning:
            out["reasoning"] = self.reasoning
        if self.refusal:
            out["refusal"] = self.refusal
        if self.parts:
            out["content_parts"] = [dict(p) for p in self.parts]
        return out

    def to_dict(self) -> dict[str, Any]:
        """The turn as a conversation message. ``reasoning`` and ``refusal`` are kept for the run's
        transcript; the provider's profile decides what of them goes back on the wire
        (runner/agent/profiles.py ``wire_messages``), so a refusal goes back as the turn's content.
        The provider's own fields of the turn (``extra``) are kept to be echoed back."""
        content = self.content if self.content is not None or self.tool_calls else self.refusal
        out: dict[str, Any] = {**self.extra, "role": "assistant", "content": content}
        if self.tool_calls:
            out["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        if self.refusal:
            out["refusal"] = self.refusal
        if self.reasoning:
            out["reasoning"] = self.reasoning
        if self.thinking_blocks:
            out[THINKING_KEY] = [dict(b) for b in self.thinking_blocks]
        return out

    def to_record(self) -> dict[str, Any]:
        """The cassette form of this turn."""
        out: dict[str, Any] = {"content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [c.to_record() for c in self.tool_calls]
        out["finish_reason"] = self.finish_reason
        out["usage"] = {"prompt_tokens": self.usage.prompt_tokens, "completion_tokens": self.usage.completion_tokens}
        if self.usage.cached_tokens:
            out["usage"]["cached_tokens"] = self.usage.cached_tokens
        if self.usage.cache_write_tokens:
            out["usage"]["cache_write_tokens"] = self.usage.cache_write_tokens
        out.update(self.extras())
        if self.extra:
            out["extra"] = dict(self.extra)
        if self.thinking_blocks:
            out[THINKING_KEY] = [dict(b) for b in self.thinking_blocks]
        return out

    @classmethod
    def from_record(cls, data: dict[str, Any]) -> Message:
        calls = tuple(
            ToolCall(
                str(c.get("id") or f"call_{i}"),
                str(c["name"]),
                _args_text(c.get("arguments", "{}")),
                _mapping(c.get("extra"), "tool_calls extra"),
            )
            for i, c in enumerate(data.get("tool_calls") or [])
        )
        usage = data.get("usage") or {}
        parts = data.get("content_parts") or []
        if not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts):
            raise ValueError("content_parts: expected a list of mappings")
        thinking = data.get(THINKING_KEY) or []
        if not isinstance(thinking, list) or not all(isinstance(b, dict) for b in thinking):
            raise ValueError(f"{THINKING_KEY}: expected a list of mappings")
        return cls(
            content=data.get("content"),
            tool_calls=calls,
            finish_reason=data.get("finish_reason") or ("tool_calls" if calls else "stop"),
            usage=Usage(
                int(usage.get("prompt_tokens", 0)),
                int(usage.get("completion_tokens", 0)),
                int(usage.get("cached_tokens", 0)),
                int(usage.get("cache_write_tokens", 0)),
            ),
            reasoning=_text_or_none(data.get("reasoning")),
            refusal=_text_or_none(data.get("refusal")),
            parts=tuple(parts),
            extra=_mapping(data.get("extra"), "extra"),
            thinking_blocks=tuple(thinking),
        )


def _mapping(value: Any, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{what}: expected a mapping")
    return value


def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _args_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    import json

    return json.dumps(value)


class LLM(Protocol):
    """The model seam: anything with this method can drive the loop."""

    model: str

    def complete(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        *,
        timeout: float | None = None,
        max_tokens: int | None = None,
    ) -> Message: ...


def arguments_value(arguments: str) -> Any:
    """A tool call's arguments as run events store them: the JSON value the text holds (so the
    store has JSON, not JSON inside a string), or the text itself when the model sent non-JSON."""
    import json

    try:
        return json.loads(arguments)
    except ValueError:
        return arguments
