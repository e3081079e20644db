"""The shape of a priced reply to a side call (pruning summaries, the skill review, the Curator's
consolidation): what ``runner.agent.auxiliary.AuxReply`` is. It lives here, below every package,
so the agent loop and the skills code name the same seam without importing each other."""

from __future__ import annotations

from typing import Protocol


class Tokens(Protocol):
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def completion_tokens(self) -> int: ...
    @property
    def cached_tokens(self) -> int: ...


class PricedReply(Protocol):
    """A reply with its tokens and cost already worked out."""

    @property
    def text(self) -> str: ...
    @property
    def usage(self) -> Tokens: ...
    @property
    def cost_usd(self) -> float: ...
    @property
    def model(self) -> str: ...
    @property
    def provider(self) -> str: ...
