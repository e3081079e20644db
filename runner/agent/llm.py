"""The chat-completions client on the openai SDK, with retries, the key seam and streaming.

The SDK is imported when the first request is made (``ChatClient._sdk``), never at import of
this module: commands that make no model call (``jobs list``, ``runs show``) never pay its
import (tests/test_architecture.py checks it). ``OpenAI(max_retries=0)`` makes exactly one HTTP
request per call; every retry, backoff, Retry-After wait and key rotation is ours, so the
credential pool (runner/agent/credentials.py) sees every status code and header.

Responses stream by default (``stream: true`` with the usage chunk): text, reasoning and
tool-call deltas are assembled into one ``Message`` (runner/agent/stream.py). The idle timeout
is measured on the stream's progress: each chunk moves it on, so a long generation that keeps
sending is not cut, while a stream that stops sending for ``idle_timeout`` ends the call. A
stream cut mid-way is retried like a connection error; its partial text is kept in a
``stream_cut`` event.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runner.agent.keys import Action, Credential, KeySource
from runner.agent.stream import (
    Assembly,
    BadChunk,
    StreamCut,
    TextEvents,
    parse_completion,
    sse_events,
    whole_as_chunks,
)
from runner.agent.types import WIRE_DROPPED, Message
from runner.config.request_fields import MaxTokensField, request_fields
from runner.errors import ModelError
from runner.tls import verify_for

if TYPE_CHECKING:
    from openai import OpenAI

    from runner.config.model_options import ModelOptions

Emit = Callable[[str, dict[str, Any]], None]
RETRYABLE = {408, 409, 425, 500, 502, 503, 504, 520, 521, 522, 524, 529}
BACKOFF_BASE = 1.0
BACKOFF_MAX = 30.0


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """Seconds from ``retry-after-ms``, ``Retry-After`` or ``x-ratelimit-reset-*`` headers."""
    lower = {k.lower(): v for k, v in headers.items()}
    try:
        if "retry-after-ms" in lower:
            return max(0.0, float(lower["retry-after-ms"]) / 1000)
        if "retry-after" in lower:
            return max(0.0, float(lower["retry-after"]))
    except ValueError:
        pass
    resets = []
    for name in ("x-ratelimit-reset-requests", "x-ratelimit-reset-tokens", "x-ratelimit-reset"):
        if name in lower:
            from runner.config.schedules import parse_duration

            try:
                value = lower[name].strip().lower()
                if value.endswith("ms"):
                    resets.append(float(value[:-2]) / 1000)
                else:
                    resets.append(
                        parse_duration(value.rstrip("s") + "s" if value.replace(".", "").isdigit() else value)
                    )
            except ValueError:
                continue
    return max(resets) if resets else None


def provider_message(body: str) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return body.strip()[:300]
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, dict):
        return str(err.get("message") or err.get("code") or err)[:300]
    return str(err or data)[:300]


@dataclass(frozen=True)
class Failure:
    """One failed attempt, as the retry logic sees it: an HTTP status with its headers and body,
    or (``status`` None) a connection error, timeout or cut stream."""

    what: str
    status: int | None = None
    headers: Mapping[str, str] | None = None
    body: str = ""


class _Clock:
    """The time bounds of one ``complete()``: the hard deadline of the call (``time.monotonic()``
    based) and the idle deadline, which every sign of progress (a chunk of the stream) moves on."""

    def __init__(self, deadline: float | None, idle: float | None):
        now = time.monotonic()
        self.deadline = deadline
        self.idle = idle
        self.idle_until = None if idle is None else now + idle

    def progress(self, now: float) -> None:
        if self.idle is not None:
            self.idle_until = now + self.idle

    def end(self) -> float | None:
        ends = [t for t in (self.deadline, self.idle_until) if t is not None]
        return min(ends) if ends else None

    def limit(self, request_timeout: float) -> float:
        end = self.end()
        if end is None:
            return request_timeout
        return max(0.5, min(request_timeout, end - time.monotonic()))


class ChatClient:
    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        keys: KeySource,
        provider: str = "default",
        request_timeout: float = 120.0,
        max_retries: int = 3,
        retry_backoff: float = BACKOFF_BASE,
        headers: Mapping[str, str] | None = None,
        emit: Emit | None = None,
        sleep: Callable[[float], None] = time.sleep,
        idle_timeout: float | None = None,
        stream: bool = True,
        options: ModelOptions | None = None,
        max_tokens_field: MaxTokensField = "auto",
    ):
        self.model = model
        self.provider = provider
        self.base_url = base_url.rstrip("/")
        self.keys = keys
        self.request_timeout = request_timeout
        self.max_retries = max_retries
        self.retry_backoff = retry_backoff
        self.headers = dict(headers or {})
        self.emit = emit or (lambda kind, payload: None)
        self.sleep = sleep
        self.idle_timeout = idle_timeout
        self.stream = stream
        if options is None:
            from runner.config.model_options import ModelOptions

            options = ModelOptions()
        self.options = options
        self.max_tokens_field = max_tokens_field
        self._client: OpenAI | None = None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def _sdk(self) -> OpenAI:
        """The SDK client, made at the first request (the import costs most of a second)."""
        if self._client is None:
            import openai

            http = openai.DefaultHttpx2Client(verify=verify_for(self.base_url))
            self._client = openai.OpenAI(
                api_key="unused",  # every request sets (or omits) its own Authorization header
                base_url=self.base_url,
                max_retries=0,
                timeout=self.request_timeout,
                default_headers=self.headers,
                http_client=http,
            )
            _ = self._client.chat.completions  # its resource modules load on first access
        return self._client

    def request_body(self, tools: Sequence[dict[str, Any]], max_tokens: int | None) -> dict[str, Any]:
        """The request's JSON fields besides model and messages: tools, options, streaming. A call's
        ``max_tokens`` (the grace call's) applies unless the options set a lower one."""
        options = self.options
        if max_tokens is not None:
            limit = max_tokens if options.max_tokens is None else min(max_tokens, options.max_tokens)
            options = options.model_copy(update={"max_tokens": limit})
        body = request_fields(options, model=self.model, field=self.max_tokens_field)
        if tools:
            body["tools"] = list(tools)
        if self.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    def complete(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        *,
        timeout: float | None = None,
        max_tokens: int | None = None,
    ) -> Message:
        """One model turn. ``timeout`` bounds the whole call, retries and waits included; the
        idle timeout bounds each wait for the next sign of progress."""
        deadline = None if timeout is None else time.monotonic() + timeout
        body = self.request_body(tools, max_tokens)
        self._sdk()  # the first call imports the SDK: inside the call's deadline, not its idle time
        clock = _Clock(deadline, self.idle_timeout)
        retries = 0
        while True:
            cred = self.keys.current()
            try:
                message = self._attempt(wire_messages(messages), body, cred, clock)
            except StreamCut as cut:
                self.emit("stream_cut", cut.payload())
                failure = Failure(f"connection error: stream cut after {cut.chars} characters ({cut.error})")
            else:
                if isinstance(message, Message):
                    self.keys.succeeded(cred)
                    return message
                failure = message
            retries = self._handle(failure, cred, retries, clock)

    def _attempt(
        self, messages: list[dict[str, Any]], body: dict[str, Any], cred: Credential | None, clock: _Clock
    ) -> Message | Failure:
        import openai

        try:
            raw = self._sdk().chat.completions.with_raw_response.create(
                model=self.model,
                messages=messages,  # type: ignore[arg-type]  # plain dicts, as the API takes them
                timeout=clock.limit(self.request_timeout),
                extra_headers=self._auth(cred),
                extra_body=self.options.extra_body or None,
                **body,
            )
            if not self.stream:
                return parse_completion(raw.parse(), provider=self.provider)
            return self._read_stream(raw.http_response, clock)
        except openai.APIStatusError as exc:
            return _status_failure(exc)
        except openai.APITimeoutError as exc:
            return Failure(f"timeout: {type(exc).__name__}")
        except openai.APIConnectionError as exc:
            return Failure(f"connection error: {type(exc).__name__}: {exc.__cause__ or exc}")
        except openai.OpenAIError as exc:  # a body the SDK could not read as a chat completion
            raise ModelError(f"{self.provider}: malformed response: {exc}", reason="model_error") from exc

    def _read_stream(self, response: Any, clock: _Clock) -> Message:
        """The streamed answer from the raw HTTP response (server-sent events read as JSON)."""
        import httpx2

        assembly = Assembly(provider=self.provider)
        json_body = response.headers.get("content-type", "").startswith("application/json")
        try:
            chunks = whole_as_chunks(response.read()) if json_body else sse_events(response.iter_bytes())
            assembly.read(chunks, clock=clock, events=TextEvents(self.emit))
        except (httpx2.HTTPError, httpx2.StreamError) as exc:
            kind = "timeout" if isinstance(exc, httpx2.TimeoutException) else "connection error"
            raise assembly.cut(f"{kind}: {type(exc).__name__}: {exc}") from exc
        except BadChunk as exc:
            raise ModelError(f"{self.provider}: malformed response: {exc}", reason="model_error") from exc
        finally:
            response.close()
        return assembly.message()

    def _auth(self, cred: Credential | None) -> dict[str, Any]:
        import openai

        headers: dict[str, Any] = dict(self.options.extra_headers)
        if cred is not None:
            headers["Authorization"] = f"Bearer {cred.value}"
        elif not any(k.lower() == "authorization" for k in self.headers):
            headers["Authorization"] = openai.Omit()  # a local server that takes no key
        return headers

    def _handle(self, failure: Failure, cred: Credential | None, retries: int, clock: _Clock) -> int:
        """Retry (returns the new count), rotate the key (same count), or raise ``ModelError``."""
        status, text = failure.status, failure.body
        headers = failure.headers or {}
        if status is None:
            return self._transient(retries, failure.what, None, clock, reason="model_unreachable")
        if status in RETRYABLE:
            return self._transient(retries, failure.what, retry_after_seconds(headers), clock, reason="model_error", status=status)
        if status in (401, 402, 403, 429) or "insufficient_quota" in text:
            action = self.keys.failed(cred, status, headers, text)
            if action is Action.ROTATE:
                return retries
            if action is Action.TRANSIENT:
                reason = "rate_limited" if status == 429 else "model_error"
                return self._transient(retries, failure.what, retry_after_seconds(headers), clock, reason=reason, status=status)
        reason = "auth_failed" if status in (401, 403) else "model_error"
        raise ModelError(f"{self.provider}: {failure.what}", reason=reason, status=status)

    def _transient(
        self, retries: int, what: str, wait: float | None, clock: _Clock, *, reason: str, status: int | None = None
    ) -> int:
        end = clock.end()
        if retries >= self.max_retries:
            raise ModelError(f"{self.provider}: {what} (gave up after {retries} retries)", reason=reason, status=status)
        if end is not None and time.monotonic() >= end:
            raise ModelError(f"{self.provider}: {what} (no time left for a retry)", reason=reason, status=status)
        delay = wait if wait is not None else min(BACKOFF_MAX, self.retry_backoff * 2**retries)
        delay = min(delay, 300.0) + (random.uniform(0, 0.25 * delay) if wait is None else 0.0)
        self.emit("model_retry", {"attempt": retries + 1, "error": what, "wait_s": round(delay, 3)})
        if end is not None:
            delay = min(delay, max(0.0, end - time.monotonic()))
        self.sleep(delay)
        return retries + 1


def wire_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation as sent: runner's own keys (a turn's ``reasoning``) left out."""
    return [
        {k: v for k, v in m.items() if k not in WIRE_DROPPED} if WIRE_DROPPED.intersection(m) else m
        for m in messages
    ]


def _status_failure(exc: Any) -> Failure:
    """An ``openai.APIStatusError`` as a Failure: status, headers and the body's text."""
    import httpx2

    response = exc.response
    try:
        text = response.text
    except httpx2.ResponseNotRead:  # closed before it was read: the SDK's copy, if any
        text = json.dumps(exc.body) if exc.body is not None else str(exc.message)
    status = int(exc.status_code)
    return Failure(f"HTTP {status}: {provider_message(text)}", status, dict(response.headers), text)
