"""The model seam the skills code needs for its side calls (the review after a run, the
Curator's consolidation pass): what ``runner.agent.auxiliary.AuxiliaryModel`` offers, restated
here so ``runner.skills`` stays below ``runner.agent`` and ``runner.run`` in the import graph. The
reply's shape, ``PricedReply`` (``runner.agent.auxiliary.AuxReply`` is one), is named by the agent
loop too (its pruning summaries).
The caller builds the model (the run's auxiliary model, or ``runner.run.model_choice.side_model``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol


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


class SideModel(Protocol):
    def complete(
        self, messages: Sequence[dict[str, Any]], *, timeout: float | None = None, max_tokens: int | None = None
    ) -> PricedReply:
        """One request without tools; raises a ``RunnerError`` (``ModelError``) when the model fails."""
        ...


ModelFactory = Callable[[], SideModel]  # built only when a side call is made
