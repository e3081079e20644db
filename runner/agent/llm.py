"""OpenAI-compatible chat-completions client (httpx), with retries and the key seam.

Why httpx and not the openai SDK: the SDK import alone costs about a second, which is most of
the start-up budget of a one-turn job, and its own retry loop would hide the status codes and
rate-limit headers the credential pool needs. The wire protocol is the same.
"""

from __future__ import annotations

import functools
import json
import os
import random
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx

from runner.agent.keys import Action, KeySource
from runner.agent.types import Message, ToolCall, Usage
from runner.errors import ModelError

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


@functools.cache
def shared_ssl_context() -> ssl.SSLContext:
    """The TLS verification context (CA bundle from SSL_CERT_FILE / SSL_CERT_DIR, else certifi),
    built once per process: loading the bundle costs tens of milliseconds, and serve's
    forkserver builds it once before forking every worker (runner/serve/prefork.py)."""
    import certifi

    cafile = os.environ.get("SSL_CERT_FILE")
    capath = os.environ.get("SSL_CERT_DIR")
    if not cafile and not capath:
        cafile = certifi.where()
    return ssl.create_default_context(cafile=cafile, capath=capath)


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
        transport: httpx.BaseTransport | None = None,
    ):
        self.model = model
        self.provider = provider
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.keys = keys
        self.request_timeout = request_timeout
        self.max_retries = max_retries
        self.retry_backoff = retry_backoff
        self.emit = emit or (lambda kind, payload: None)
        self.sleep = sleep
        self._deadline: float | None = None
        verify = shared_ssl_context() if transport is None else True
        self._http = httpx.Client(headers=dict(headers or {}), transport=transport, verify=verify)

    def close(self) -> None:
        self._http.close()

    def complete(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        *,
        timeout: float | None = None,
        max_tokens: int | None = None,
    ) -> Message:
        body: dict[str, Any] = {"model": self.model, "messages": list(messages)}
        if tools:
            body["tools"] = list(tools)
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        payload = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        # ``timeout`` bounds the whole call, retries and waits included
        self._deadline = None if timeout is None else time.monotonic() + timeout
        retries = 0
        while True:
            cred = self.keys.current()
            headers = {"Content-Type": "application/json"}
            if cred is not None:
                headers["Authorization"] = f"Bearer {cred.value}"
            try:
                response = self._http.post(self.url, content=payload, headers=headers, timeout=self._limit())
            except (httpx.TimeoutException, httpx.TransportError) as exc:
                kind = "timeout" if isinstance(exc, httpx.TimeoutException) else "connection error"
                retries = self._transient(retries, f"{kind}: {type(exc).__name__}", None, reason="model_unreachable")
                continue
            status = response.status_code
            if status == 200:
                self.keys.succeeded(cred)
                return self._parse(response)
            text = response.text
            if status in RETRYABLE:
                retries = self._transient(
                    retries,
                    f"HTTP {status}: {provider_message(text)}",
                    retry_after_seconds(response.headers),
                    reason="model_error",
                    status=status,
                )
                continue
            if status in (401, 402, 403, 429) or "insufficient_quota" in text:
                action = self.keys.failed(cred, status, response.headers, text)
                if action is Action.ROTATE:
                    continue
                if action is Action.TRANSIENT:
                    retries = self._transient(
                        retries,
                        f"HTTP {status}: {provider_message(text)}",
                        retry_after_seconds(response.headers),
                        reason="rate_limited" if status == 429 else "model_error",
                        status=status,
                    )
                    continue
            reason = "auth_failed" if status in (401, 403) else "model_error"
            raise ModelError(f"{self.provider}: HTTP {status}: {provider_message(text)}", reason=reason, status=status)

    def _limit(self) -> float:
        if self._deadline is None:
            return self.request_timeout
        return max(0.5, min(self.request_timeout, self._deadline - time.monotonic()))

    def _transient(self, retries: int, what: str, wait: float | None, *, reason: str, status: int | None = None) -> int:
        if retries >= self.max_retries:
            raise ModelError(f"{self.provider}: {what} (gave up after {retries} retries)", reason=reason, status=status)
        if self._deadline is not None and time.monotonic() >= self._deadline:
            raise ModelError(f"{self.provider}: {what} (no time left for a retry)", reason=reason, status=status)
        delay = wait if wait is not None else min(BACKOFF_MAX, self.retry_backoff * 2**retries)
        delay = min(delay, 300.0) + (random.uniform(0, 0.25 * delay) if wait is None else 0.0)
        self.emit("model_retry", {"attempt": retries + 1, "error": what, "wait_s": round(delay, 3)})
        if self._deadline is not None:
            delay = min(delay, max(0.0, self._deadline - time.monotonic()))
        self.sleep(delay)
        return retries + 1

    def _parse(self, response: httpx.Response) -> Message:
        try:
            data = response.json()
            choice = data["choices"][0]
            msg = choice.get("message") or {}
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ModelError(f"{self.provider}: malformed response: {exc}", reason="model_error") from exc
        calls = tuple(
            ToolCall(
                id=str(c.get("id") or f"call_{i}"),
                name=str((c.get("function") or {}).get("name", "")),
                arguments=_args(c.get("function") or {}),
            )
            for i, c in enumerate(msg.get("tool_calls") or [])
        )
        usage = data.get("usage") or {}
        return Message(
            content=msg.get("content"),
            tool_calls=calls,
            finish_reason=choice.get("finish_reason"),
            usage=Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)),
            model=data.get("model"),
        )


def _args(function: dict[str, Any]) -> str:
    value = function.get("arguments", "{}")
    return value if isinstance(value, str) else json.dumps(value)
