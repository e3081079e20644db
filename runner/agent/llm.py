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
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from runner.agent.keys import Action, Credential, KeySource
from runner.agent.profiles import (
    Auth,
    ErrorKind,
    Profile,
    error_kind,
    error_message,
    profile_for,
    retry_after,
    wire_messages,
)
from runner.agent.stream import (
    Assembly,
    BadChunk,
    StreamCut,
    StreamError,
    TextEvents,
    sse_events,
    whole_as_chunks,
)
from runner.agent.types import Message, Usage
from runner.config.model_options import ModelOptions
from runner.config.request_fields import MaxTokensField, request_fields
from runner.errors import ModelError
from runner.events import Emit, Event, ProviderProtocol, UsageEstimated, no_events
from runner.events import ModelRetry as RetryEvent
from runner.host.tls import verify_for

if TYPE_CHECKING:
    from openai import OpenAI

RETRYABLE = {408, 409, 425, 500, 502, 503, 504, 520, 521, 522, 524, 529}
BACKOFF_BASE = 1.0
BACKOFF_MAX = 30.0


@dataclass(frozen=True)
class Failure:
    """One failed attempt, as the retry logic sees it: an HTTP status with its headers and body,
    or (``status`` None) a connection error, timeout or cut stream."""

    what: str
    status: int | None = None
    headers: Mapping[str, str] | None = None
    body: str = ""


# the run reason of an error the provider's words decide (the rest are model_error)
KIND_REASONS = {
    ErrorKind.BAD_KEY: "auth_failed",
    ErrorKind.NO_CREDIT: "no_credit",
    ErrorKind.RATE_LIMIT: "rate_limited",
    ErrorKind.MODERATION: "moderation",
    ErrorKind.CONTENT_FILTER: "content_filter",
}
CHARS_PER_TOKEN = 4  # for a provider that sends no usage


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

    def idle_over(self, now: float) -> bool:
        return self.idle_until is not None and now > self.idle_until

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
        profile: Profile | None = None,
        api_version: str | None = None,
    ):
        self.model = model
        self.provider = provider
        self.profile = profile or profile_for(base_url)
        self.base_url, self.query = _split_query(base_url)
        if api_version:
            self.query["api-version"] = api_version
        self.keys = keys
        self.request_timeout = request_timeout
        self.max_retries = max_retries
        self.retry_backoff = retry_backoff
        self.headers = dict(headers or {})
        self.emit = emit or no_events
        self.sleep = sleep
        self.idle_timeout = idle_timeout
        self.stream = stream
        if options is None:
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
                default_query=self.query or None,  # Azure's api-version
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
        sent = wire_messages(messages, self.profile)
        while True:
            cred = self.keys.current()
            try:
                message = self._attempt(sent, body, cred, clock)
            except StreamCut as cut:
                self.emit(Event.STREAM_CUT, cut.event())
                failure = Failure(f"connection error: stream cut after {cut.chars} characters ({cut.error})")
            except StreamError as exc:  # an error object where the answer was due (HTTP 200)
                failure = _error_failure(exc)
            except BadChunk as exc:
                self.emit(Event.PROVIDER_PROTOCOL, ProviderProtocol(str(exc), exc.excerpt))
                raise ModelError(
                    f"{self.provider}: the answer is not a chat completion: {exc} (excerpt in the run's steps)",
                    reason="provider_protocol",
                ) from None
            else:
                if isinstance(message, Message):
                    self.keys.succeeded(cred)
                    return self._usage_checked(message, sent)
                failure = message
            retries = self._handle(failure, cred, retries, clock)

    def _usage_checked(self, message: Message, sent: list[dict[str, Any]]) -> Message:
        """The message, with tokens estimated from characters when the provider sent no usage
        (so budgets still hold), and a ``usage_estimated`` event saying so."""
        if not message.usage_estimated:
            return message
        prompt = len(json.dumps(sent, ensure_ascii=False)) // CHARS_PER_TOKEN
        out = len(message.content or "") + len(message.reasoning or "")
        out += sum(len(c.name) + len(c.arguments) for c in message.tool_calls)
        usage = Usage(prompt, max(1, out // CHARS_PER_TOKEN))
        detail = "the provider sent no token counts; estimated from characters (4 per token)"
        self.emit(Event.USAGE_ESTIMATED, UsageEstimated(usage.prompt_tokens, usage.completion_tokens, detail))
        return replace(message, usage=usage)

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
            return self._read(raw.http_response, clock)
        except openai.APIStatusError as exc:
            return _status_failure(exc)
        except openai.APITimeoutError as exc:
            return Failure(f"timeout: {type(exc).__name__}")
        except openai.APIConnectionError as exc:
            return Failure(f"connection error: {type(exc).__name__}: {exc.__cause__ or exc}")

    def _read(self, response: Any, clock: _Clock) -> Message:
        """The answer from the raw HTTP response, read as JSON: server-sent events, or a whole
        completion (not streamed, or a server that answers a stream request with JSON). Any other
        body (an HTML page at a wrong base URL) is ``BadChunk``: not a cut to retry."""
        import httpx2

        assembly = Assembly(provider=self.provider)
        kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
        try:
            if kind == "text/event-stream":
                chunks: Any = sse_events(response.iter_bytes())
            elif kind in ("application/json", "") or kind.endswith("+json") or not self.stream:
                chunks = whole_as_chunks(response.read())
            else:
                excerpt = response.read()[:400].decode("utf-8", "replace")
                raise BadChunk(f"HTTP {response.status_code} with content-type {kind!r}", excerpt)
            assembly.read(chunks, clock=clock, events=TextEvents(self.emit))
        except (httpx2.HTTPError, httpx2.StreamError) as exc:
            what = "timeout" if isinstance(exc, httpx2.TimeoutException) else "connection error"
            raise assembly.cut(f"{what}: {type(exc).__name__}: {exc}") from exc
        finally:
            response.close()
        message = assembly.message()
        return message if assembly.usage_seen else replace(message, usage_estimated=True)

    def _auth(self, cred: Credential | None) -> dict[str, Any]:
        import openai

        headers: dict[str, Any] = dict(self.options.extra_headers)
        if self.profile.auth is Auth.API_KEY:
            headers["Authorization"] = openai.Omit()
            if cred is not None:
                headers["api-key"] = cred.value
        elif cred is not None:
            headers["Authorization"] = f"Bearer {cred.value}"
        elif not any(k.lower() == "authorization" for k in self.headers):
            headers["Authorization"] = openai.Omit()  # a local server that takes no key
        return headers

    def _handle(self, failure: Failure, cred: Credential | None, retries: int, clock: _Clock) -> int:
        """Retry (returns the new count), rotate the key (same count), or raise ``ModelError``.
        What an HTTP error means is the profile's to say (``ErrorKind``)."""
        status, text = failure.status, failure.body
        headers = failure.headers or {}
        if status is None:
            return self._transient(retries, failure.what, None, clock, reason="model_unreachable")
        kind = error_kind(self.profile, status, text)
        wait = retry_after(headers, text)
        if kind in (ErrorKind.BAD_KEY, ErrorKind.NO_CREDIT, ErrorKind.RATE_LIMIT):
            action = self.keys.failed(cred, status, headers, text, kind=kind)
            if action is Action.ROTATE:
                return retries
            if action is Action.TRANSIENT:
                return self._transient(retries, failure.what, wait, clock, reason=KIND_REASONS[kind], status=status)
        elif kind in (ErrorKind.OVERLOAD, ErrorKind.SERVER) or status in RETRYABLE:
            return self._transient(retries, failure.what, wait, clock, reason="model_error", status=status)
        reason = KIND_REASONS.get(kind, "model_error")
        raise ModelError(f"{self.provider}: {failure.what}{_hint(kind, self.provider)}", reason=reason, status=status)

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
        self.emit(Event.MODEL_RETRY, RetryEvent(retries + 1, what, round(delay, 3)))
        if end is not None:
            delay = min(delay, max(0.0, end - time.monotonic()))
        self.sleep(delay)
        return retries + 1


def _hint(kind: ErrorKind, provider: str) -> str:
    if kind is ErrorKind.NO_CREDIT:
        return f" (add credits, then: runner creds reset --provider {provider})"
    if kind is ErrorKind.BAD_KEY:
        return f" (fix the key, then: runner creds reset --provider {provider})"
    return ""


def _split_query(base_url: str) -> tuple[str, dict[str, str]]:
    """A base URL without its query (``...?api-version=2024-10-21``), and that query's fields,
    which go on every request (the SDK would otherwise glue the path after the query)."""
    from urllib.parse import parse_qsl, urlsplit, urlunsplit

    parts = urlsplit(base_url)
    query = dict(parse_qsl(parts.query))
    return urlunsplit(parts._replace(query="", fragment="")).rstrip("/"), query


def _error_failure(exc: StreamError) -> Failure:
    """An error object sent with HTTP 200 (OpenRouter, Groq, TGI, LM Studio; whole or mid-stream)
    as the HTTP failure it stands for (``StreamError.status``)."""
    body = json.dumps({"error": exc.error})
    return Failure(f"HTTP {exc.status} (sent with 200): {exc.message}", exc.status, {}, body)


def _status_failure(exc: Any) -> Failure:
    """An ``openai.APIStatusError`` as a Failure: status, headers and the body's text."""
    import httpx2

    response = exc.response
    try:
        text = response.text
    except httpx2.ResponseNotRead:  # closed before it was read: the SDK's copy, if any
        text = json.dumps(exc.body) if exc.body is not None else str(exc.message)
    status = int(exc.status_code)
    return Failure(f"HTTP {status}: {error_message(text)}", status, dict(response.headers), text)
