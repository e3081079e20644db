"""Fallback providers: a job's ``model:`` list, tried in order.

``FallbackLLM`` is an ``LLM`` over a chain of (provider name, LLM). It asks the current one;
when that one's keys are all cooling past what the run may wait (``credentials_exhausted``, or
``auth_failed`` / ``no_credit`` / ``rate_limited`` when one kind of failure cooled them all) or all
dead (``credentials_dead``), it moves to the next provider for the rest of the run and
records a ``provider_fallback`` event. Every other error is the run's to handle, as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runner.agent.types import LLM, Message
from runner.errors import ModelError
from runner.events import Emit, Event, ProviderFallback

# the provider cannot answer this run: its keys are cooling, dead, out of credit, refused or rate limited
SWITCH_REASONS = frozenset({"credentials_exhausted", "credentials_dead", "auth_failed", "no_credit", "rate_limited"})


class FallbackLLM:
    def __init__(self, chain: Sequence[tuple[str, LLM]], *, emit: Emit):
        if not chain:
            raise ValueError("FallbackLLM needs at least one provider")
        self.chain = list(chain)
        self.emit = emit
        self.index = 0
        self.model = self.chain[0][1].model

    @property
    def provider(self) -> str:
        return self.chain[self.index][0]

    def complete(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        *,
        timeout: float | None = None,
        max_tokens: int | None = None,
    ) -> Message:
        while True:
            name, llm = self.chain[self.index]
            try:
                return llm.complete(messages, tools, timeout=timeout, max_tokens=max_tokens)
            except ModelError as exc:
                if exc.reason not in SWITCH_REASONS or self.index + 1 >= len(self.chain):
                    raise
                self.index += 1
                nxt, nxt_llm = self.chain[self.index]
                self.model = nxt_llm.model
                self.emit(Event.PROVIDER_FALLBACK, ProviderFallback(name, nxt, nxt_llm.model, exc.reason, str(exc)))
