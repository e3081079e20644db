"""Chat completions made into one ``Message``: streamed chunks assembled (text, reasoning,
refusal and tool-call deltas, the provider's own fields, the usage chunk), whole responses read
as the one chunk they amount to.

Reasoning comes as ``reasoning_content`` (DeepSeek, vLLM, llama.cpp) or ``reasoning``
(OpenRouter, Ollama); content may come as a list of parts; both are kept on the ``Message``.
Cached prompt tokens are ``usage.prompt_tokens_details.cached_tokens``.
Nothing here imports the SDK: bodies and events are read as JSON.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from runner.agent.types import Message, ToolCall, Usage
from runner.events import Emit, Event, StreamText
from runner.events import StreamCut as CutEvent

TEXT_EVENT_SECONDS = 0.1  # streamed text reaches the run's events at most this often
TEXT_EVENT_CHARS = 16_000  # and at most this much of one turn (the response event has it all)
PARTIAL_CHARS = 20_000  # a cut stream's partial text kept in its event


class Progress(Protocol):
    @property
    def deadline(self) -> float | None: ...

    def progress(self, now: float) -> None: ...

    def idle_over(self, now: float) -> bool: ...


class StreamCut(Exception):
    """The stream stopped before its end (a dropped connection, a stall, no finish reason)."""

    def __init__(self, error: str, text: str, reasoning: str):
        super().__init__(error)
        self.error, self.text, self.reasoning = error, text, reasoning

    @property
    def chars(self) -> int:
        return len(self.text)

    def event(self) -> CutEvent:
        return CutEvent(self.error, self.chars, self.text[-PARTIAL_CHARS:], self.reasoning[-PARTIAL_CHARS:] or None)


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
        text = "".join(self.text)[: self.budget]
        self.budget -= len(text)
        reasoning = None
        if self.reasoning and self.budget > 0:
            reasoning = "".join(self.reasoning)[: self.budget]
            self.budget -= len(reasoning)
        self.emit(Event.STREAM_TEXT, StreamText(text, reasoning, True if self.budget <= 0 else None))
        self.text, self.reasoning, self.last = [], [], now


DONE: dict[str, Any] = {"[DONE]": True}  # the stream's ``data: [DONE]``, passed on as a marker
TICK: dict[str, Any] = {}  # bytes arrived with no event (a keep-alive comment): time to look at the clock


def sse_events(blocks: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    """The JSON objects of a server-sent event stream's ``data:`` fields, then ``DONE`` at
    ``[DONE]``, from the body's bytes as they arrive (lines split here: cheaper than a text
    decoder). A block of bytes that completes no event yields ``TICK``, so the reader checks its
    clock even while a server sends nothing but keep-alive comments."""
    rest = b""
    data: list[bytes] = []
    for block in blocks:
        yielded = False
        lines = (rest + block).split(b"\n")
        rest = lines.pop()
        for line in lines:
            line = line.rstrip(b"\r")
            if line.startswith(b"data:"):
                data.append(line[6:] if line.startswith(b"data: ") else line[5:])
            elif not line and data:
                payload, data = b"\n".join(data), []
                if payload.strip() == b"[DONE]":
                    yield DONE
                    return
                yielded = True
                yield _chunk(payload)
            # ``event:``, ``id:``, ``retry:`` and ``:`` comment lines carry nothing we use
        if not yielded:
            yield TICK
    if rest.startswith(b"data:"):
        data.append(rest[5:])
    if data:
        payload = b"\n".join(data)
        if payload.strip() == b"[DONE]":
            yield DONE
        else:
            yield _chunk(payload)


def whole_as_chunks(body: bytes) -> list[dict[str, Any]]:
    """A whole chat completion (not streamed, or a server that answers ``stream: true`` with
    plain JSON) as the one chunk it amounts to: each choice's message as its delta, then DONE."""
    data = _chunk(body)
    choices = []
    for choice in data.get("choices") or ():
        if not isinstance(choice, dict):
            raise BadChunk(f"a choice is not an object: {json.dumps(choice)[:200]}")
        delta = dict(choice.get("message") or choice.get("delta") or {})
        calls = delta.get("tool_calls")
        if isinstance(calls, dict):
            calls = [calls]
        if isinstance(calls, list):
            delta["tool_calls"] = [{**c, "index": c.get("index", i)} if isinstance(c, dict) else c for i, c in enumerate(calls)]
        choices.append({**choice, "delta": delta})
    return [{**data, "choices": choices}, DONE]


def _chunk(payload: bytes) -> dict[str, Any]:
    excerpt = payload[:400].decode("utf-8", "replace")
    try:
        value = json.loads(payload)
    except ValueError as exc:
        raise BadChunk("the answer is not JSON", excerpt) from exc
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict) and "error" in value[0]:
        value = value[0]  # Gemini wraps its error objects in a list
    if not isinstance(value, dict):
        raise BadChunk("the answer is not a JSON object", excerpt)
    return value


class BadChunk(ValueError):
    """A body or streamed event that is not a chat completion (chunk) object: the provider spoke
    a protocol runner does not know (``provider_protocol``)."""

    def __init__(self, message: str, excerpt: str = ""):
        super().__init__(message)
        self.excerpt = excerpt or message


class StreamError(Exception):
    """The provider sent an error object where an answer was due (an HTTP 200 body, or an event
    mid-stream). ``status``: the HTTP status it stands for: the number it gives (OpenRouter's
    ``code``, Groq's ``status_code``); else 400 when it says the request was at fault (a bare
    error string, a validation or invalid-request type), else 502 (a server fault, retried)."""

    def __init__(self, chunk: dict[str, Any]):
        error = chunk.get("error")
        self.error = error
        self.message = _error_text(error)
        self.status = _status_of(chunk, error)
        super().__init__(self.message)


def _status_of(chunk: dict[str, Any], error: Any) -> int:
    inner = error if isinstance(error, dict) else {}
    for value in (inner.get("status_code"), chunk.get("status_code"), inner.get("code"), inner.get("status")):
        if isinstance(value, str) and value.isdigit():
            value = int(value)
        if isinstance(value, int) and 400 <= value < 600:
            return value
    kind = f"{inner.get('type', '')} {chunk.get('error_type', '')} {inner.get('code', '')}".lower()
    if isinstance(error, str) or any(w in kind for w in ("invalid_request", "validation", "not_found", "tool_use_failed")):
        return 400
    return 502


# fields of a delta (or a whole message) that runner reads itself; any other field the provider
# sends on an assistant turn is its own, kept and echoed back (``Message.extra``)
READ_FIELDS = frozenset({"role", "content", "reasoning_content", "reasoning", "refusal", "tool_calls", "function_call"})
RESPONSE_ONLY = frozenset({"annotations", "audio", "index", "logprobs"})  # sent to us, never back
CALL_FIELDS = frozenset({"index", "id", "type", "function"})


@dataclass
class _Call:
    id: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Assembly:
    """The deltas of one answer, put together (a whole answer is one chunk). Chunks are read as
    plain JSON: the SDK's typed chunks cost about 0.3 ms each to build, 150 ms for a 2 KB answer
    sent a token at a time.

    Tool calls: a delta with an ``index`` continues the call at that index, unless it brings a
    new id or a new name (servers that send every parallel call at ``index: 0``); a delta with
    no index continues the last call unless it brings an id or a name. Arguments given as a JSON
    object are serialised; the provider's own fields of a call (Gemini's ``extra_content``) are
    kept."""

    provider: str
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    calls: list[_Call] = field(default_factory=list)
    at_index: dict[int, _Call] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    parts: list[dict[str, Any]] = field(default_factory=list)
    finish: str | None = None
    usage: Usage = field(default_factory=Usage)
    usage_seen: bool = False
    done: bool = False
    model: str | None = None

    def read(self, chunks: Iterable[dict[str, Any]], *, clock: Progress, events: TextEvents) -> None:
        """Consume the stream; a stream that ends early raises ``StreamCut`` with the partial text
        (the caller turns a transport error mid-way into one too, with ``cut``). The call's
        deadline is checked whenever bytes arrive, keep-alive comments included; only events
        count as progress for the idle timeout."""
        for chunk in chunks:
            now = time.monotonic()
            if clock.deadline is not None and now > clock.deadline:
                raise self.cut("the call's time ran out mid-stream")
            if chunk is TICK:
                if clock.idle_over(now):
                    raise self.cut("the stream sent nothing but keep-alives for the idle timeout")
                continue
            if chunk is DONE:
                self.done = True
                break
            clock.progress(now)
            if "error" in chunk and chunk["error"]:  # an error sent where the answer was due
                raise StreamError(chunk)
            if "choices" not in chunk and "usage" not in chunk:
                raise BadChunk("an answer with neither choices nor usage", json.dumps(chunk)[:400])
            text, thought = self.add(chunk)
            if text or thought:
                events.add(text, thought, now)
        if self.finish is None:
            if self.done and (self.content or self.calls or self.refusal):
                self.finish = "tool_calls" if self.calls else "stop"  # a server that sends no finish reason
            else:
                raise self.cut("the stream ended without a finish reason")

    def cut(self, error: str) -> StreamCut:
        return StreamCut(error, "".join(self.content), "".join(self.reasoning))

    def add(self, chunk: dict[str, Any]) -> tuple[str, str]:
        """One chunk; returns the text and reasoning it added."""
        self.model = chunk.get("model") or self.model
        if isinstance(chunk.get("usage"), dict) and chunk["usage"]:
            self.usage, self.usage_seen = usage_of(chunk["usage"]), True
        text = thought = ""
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise BadChunk("choices is not a list", json.dumps(chunk)[:400])
        for choice in choices:
            if not isinstance(choice, dict):
                raise BadChunk("a choice is not an object", json.dumps(chunk)[:400])
            if choice.get("index", 0) not in (0, None):
                continue
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                raise BadChunk("a delta is not an object", json.dumps(chunk)[:400])
            text, thought = self._delta(delta)
            if choice.get("finish_reason"):
                self.finish = str(choice["finish_reason"])
        return text, thought

    def _delta(self, delta: dict[str, Any]) -> tuple[str, str]:
        text, parts, refusal = read_content(delta.get("content"))
        text = text or ""
        thought = delta.get("reasoning_content") or delta.get("reasoning") or ""
        if not isinstance(thought, str):
            thought = json.dumps(thought, ensure_ascii=False)
        if parts:
            self.parts.extend(parts)
            thought += "".join(_thinking_text(p) for p in parts)
        if text:
            self.content.append(text)
        if thought:
            self.reasoning.append(thought)
        if delta.get("refusal") or refusal:
            self.refusal.append(str(delta.get("refusal") or refusal))
        calls = delta.get("tool_calls") or ()
        if isinstance(calls, dict):
            calls = [calls]  # TGI: one call as an object
        for call in calls:
            if not isinstance(call, dict):
                raise BadChunk("a tool call is not an object", json.dumps(delta)[:400])
            self._call_delta(call)
        for key, value in delta.items():
            if key not in READ_FIELDS and key not in RESPONSE_ONLY and value not in (None, "", [], {}):
                _merge(self.extra, key, value)
        return text, thought

    def _call_delta(self, call: dict[str, Any]) -> None:
        index = call.get("index")
        function = call.get("function") or {}
        new_id, new_name = call.get("id") or None, function.get("name") or None
        slot = self.at_index.get(index) if isinstance(index, int) else (self.calls[-1] if self.calls else None)
        arguments = function.get("arguments")
        if slot is None:
            starts = True
        elif new_id is not None and slot.id is not None:
            starts = new_id != slot.id
        elif (new_id is not None or new_name is not None) and slot.name:
            # a call's head with no id to compare: another name is another call; the same name again
            # (llama.cpp repeats it on every delta) is another call only once the first one's
            # arguments are whole and this delta begins new ones (or none yet)
            fresh = arguments in (None, "") or isinstance(arguments, dict) or str(arguments).lstrip().startswith("{")
            starts = (new_name is not None and new_name != slot.name) or (fresh and _whole(slot))
        else:
            starts = False
        if starts:
            slot = _Call()
            self.calls.append(slot)
            if isinstance(index, int):
                self.at_index[index] = slot
        assert slot is not None
        if new_id is not None:
            slot.id = str(new_id)
        if new_name is not None:
            slot.name = str(new_name) if slot.name == "" else slot.name
        if isinstance(arguments, (dict, list)):
            slot.arguments = [json.dumps(arguments, ensure_ascii=False)]  # llama.cpp: an object, whole
        elif arguments:
            slot.arguments.append(str(arguments))
        for key, value in call.items():
            if key not in CALL_FIELDS and value not in (None, "", [], {}):
                _merge(slot.extra, key, value)

    def message(self) -> Message:
        calls = tuple(_named(ToolCall(c.id or f"call_{i}", c.name, "".join(c.arguments) or "{}", c.extra)) for i, c in enumerate(self.calls))
        return Message(
            content="".join(self.content) if self.content else (None if calls or self.refusal else ""),
            tool_calls=calls,
            finish_reason=self.finish,
            usage=self.usage,
            model=self.model,
            reasoning="".join(self.reasoning) or None,
            refusal="".join(self.refusal) or None,
            parts=tuple(self.parts),
            extra=self.extra,
        )


def _whole(call: _Call) -> bool:
    try:
        return isinstance(json.loads("".join(call.arguments)), dict)
    except ValueError:
        return False


def _named(call: ToolCall) -> ToolCall:
    """TGI's grammar-made calls have no name: the arguments are ``{"function": {"_name": NAME,
    ...arguments}}``, sometimes followed by the model's end token. Made a normal call."""
    if call.name:
        return call
    text = call.arguments.strip()
    if "<|" in text:
        text = text[: text.index("<|")].strip()
    try:
        data = json.loads(text)
    except ValueError:
        return call
    inner = data.get("function") if isinstance(data, dict) else None
    if isinstance(inner, dict) and isinstance(inner.get("_name"), str):
        args = {k: v for k, v in inner.items() if k != "_name"}
        return ToolCall(call.id, inner["_name"], json.dumps(args, ensure_ascii=False), call.extra)
    return call


def _merge(into: dict[str, Any], key: str, value: Any) -> None:
    """A provider field of a streamed turn: text pieces joined, list pieces appended, objects
    merged, anything else the latest."""
    old = into.get(key)
    if isinstance(old, str) and isinstance(value, str):
        into[key] = old + value
    elif isinstance(old, list) and isinstance(value, list):
        into[key] = [*old, *value]
    elif isinstance(old, dict) and isinstance(value, dict):
        merged = dict(old)
        for k, v in value.items():
            _merge(merged, k, v)
        into[key] = merged
    else:
        into[key] = value


def _thinking_text(part: dict[str, Any]) -> str:
    """The text of a ``thinking`` content part (Magistral: a list of text chunks under ``thinking``)."""
    if part.get("type") != "thinking":
        return ""
    inner = part.get("thinking")
    if isinstance(inner, str):
        return inner
    if isinstance(inner, list):
        return "".join(str(p.get("text", "")) for p in inner if isinstance(p, dict))
    return ""


def usage_of(usage: dict[str, Any]) -> Usage:
    """Usage of the OpenAI shape; cached prompt tokens from ``prompt_tokens_details.cached_tokens``
    or DeepSeek's ``prompt_cache_hit_tokens``."""
    details = usage.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Usage(
        _int(usage.get("prompt_tokens")),
        _int(usage.get("completion_tokens")),
        _int(cached if cached is not None else usage.get("prompt_cache_hit_tokens")),
    )


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error.get("code") or error)[:300]
    return str(error)[:300]


def read_content(content: Any) -> tuple[str | None, tuple[dict[str, Any], ...], str | None]:
    """(text, parts, refusal) of a message's content: a string, or a list of parts whose text
    parts are joined (``{"type": "text", "text": ...}``; a ``refusal`` part is the refusal)."""
    if content is None or isinstance(content, str):
        return content, (), None
    parts = tuple(_plain(p) for p in content) if isinstance(content, list) else ()
    texts = [str(p.get("text", "")) for p in parts if p.get("type") in ("text", "output_text")]
    refusals = [str(p.get("refusal", "")) for p in parts if p.get("type") == "refusal"]
    return ("".join(texts) if texts else None), parts, ("".join(refusals) or None)


def _plain(part: Any) -> dict[str, Any]:
    if isinstance(part, dict):
        return part
    dump = getattr(part, "model_dump", None)
    return dump(exclude_none=True) if callable(dump) else {"type": "text", "text": str(part)}

