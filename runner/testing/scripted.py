"""``ScriptedLLM``: the model seam (``runner.agent.types.LLM``) answered from a script, in process.

It takes the same replies as the HTTP server (``final``, ``call``, ``calls``, ``error``,
``hang``) and ready-made ``Message`` values, and hands them to whatever drives the seam (the
agent loop) without a socket. Use it to test code that calls ``complete()`` directly; use
``FakeOpenAI`` to test a whole ``runner run-job`` (the HTTP client, its retries and the
credential pool sit above the socket and only the server exercises them).

A reply the HTTP client would give up on becomes the ``ModelError`` it would raise: an
``error(status)`` raises at once (this seam is below the client's retries), a ``hang`` longer
than the call's ``timeout`` raises after the timeout.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from typing import Any

from runner.agent.types import Message, ToolCall, Usage
from runner.errors import ModelError
from runner.testing.fakeopenai import Reply

Step = Reply | Message


class ScriptedLLM:
    """Answers each ``complete()`` with the next scripted step; logs every request it gets."""

    def __init__(self, *steps: Step, model: str = "scripted", default: Step | None = None):
        self.model = model
        self.script: list[Step] = []
        self.default = default
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.add(*steps)

    def add(self, *steps: Step) -> ScriptedLLM:
        for step in steps:
            if isinstance(step, Reply) and step.keys is not None:
                raise ValueError("a reply limited to API keys needs FakeOpenAI: ScriptedLLM sees no keys")
        with self._lock:
            self.script.extend(steps)
        return self

    def complete(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        *,
        timeout: float | None = None,
        max_tokens: int | None = None,
    ) -> Message:
        with self._lock:
            n = len(self.requests) + 1
            self.requests.append(
                {
                    "messages": [dict(m) for m in messages],
                    "tools": list(tools),
                    "timeout": timeout,
                    "max_tokens": max_tokens,
                }
            )
            step = self._pop(messages)
        if step is None:
            raise ModelError(f"scripted model: script exhausted at request {n}", reason="model_error", status=500)
        if isinstance(step, Message):
            return step
        return self._answer(step, n, timeout)

    def _pop(self, messages: Sequence[dict[str, Any]]) -> Step | None:
        """The first step that fits this request (a ``Reply`` with ``when`` needs its text in a user
        message), else ``default``; call with the lock held."""
        for i, step in enumerate(self.script):
            if isinstance(step, Message) or step.fits(None, list(messages)):
                return self.script.pop(i)
        return self.default

    def _answer(self, reply: Reply, n: int, timeout: float | None) -> Message:
        if reply.hang:
            if timeout is not None and reply.hang > timeout:
                time.sleep(timeout)
                raise ModelError(f"scripted model: no answer within {timeout:.1f}s", reason="model_unreachable")
            time.sleep(reply.hang)
        if reply.status != 200:
            raise ModelError(
                f"scripted model: HTTP {reply.status}: {_message(reply.body)}",
                reason=_reason(reply.status),
                status=reply.status,
            )
        calls = tuple(
            ToolCall(f"call_{n}_{i}", name, args if isinstance(args, str) else json.dumps(args))
            for i, (name, args) in enumerate(reply.tool_calls)
        )
        return Message(
            content=reply.content,
            tool_calls=calls,
            finish_reason=reply.finish_reason or ("tool_calls" if calls else "stop"),
            usage=Usage(*reply.usage, cached_tokens=reply.cached),
            model=self.model,
            reasoning=reply.reasoning,
            refusal=reply.refusal,
        )


def _reason(status: int) -> str:
    if status in (401, 403):
        return "auth_failed"
    return "rate_limited" if status == 429 else "model_error"


def _message(body: Any) -> str:
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        return str(err.get("message") or err)
    return str(body or "error")
