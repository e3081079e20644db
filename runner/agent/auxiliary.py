"""The auxiliary model: a seam for side calls that are not the agent's turns (context summaries
today; the Curator and memory later).

``AuxiliaryModel.complete(messages)`` returns an ``AuxReply``: the text, its token usage and its
cost, priced at the rates of the provider that answered. The caller counts the reply in the run's
tokens, cost and budget and records it as an event. ``Priced`` puts any ``LLM`` (the run's own
model, or a client for config.yaml's ``auxiliary:`` provider) behind the seam.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from runner.agent.loop import Pricing
from runner.agent.types import LLM, Usage


@dataclass(frozen=True)
class AuxReply:
    text: str
    usage: Usage
    cost_usd: float
    model: str
    provider: str  # '' when the provider has no name (a cassette, a test's model)


class AuxiliaryModel(Protocol):
    @property
    def model(self) -> str: ...

    def complete(
        self, messages: Sequence[dict[str, Any]], *, timeout: float | None = None, max_tokens: int | None = None
    ) -> AuxReply:
        """One request without tools; raises ``ModelError`` like the LLM seam."""
        ...


@dataclass(frozen=True)
class Priced:
    """An ``LLM`` as an auxiliary model, each reply priced with ``pricing`` right after it answered
    (a fallback chain's pricing reads which provider that was)."""

    llm: LLM
    pricing: Pricing = Pricing()
    provider: str = ""

    @property
    def model(self) -> str:
        return self.llm.model

    def complete(
        self, messages: Sequence[dict[str, Any]], *, timeout: float | None = None, max_tokens: int | None = None
    ) -> AuxReply:
        if max_tokens is None:
            reply = self.llm.complete(messages, [], timeout=timeout)
        else:
            reply = self.llm.complete(messages, [], timeout=timeout, max_tokens=max_tokens)
        cost = self.pricing.cost(reply.usage)
        return AuxReply(reply.content or "", reply.usage, cost, reply.model or self.llm.model, self.provider)
