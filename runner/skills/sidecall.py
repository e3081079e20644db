"""The model seam the skills code needs for its side calls (the review after a run, the
Curator's consolidation pass): what ``runner.agent.auxiliary.AuxiliaryModel`` offers, restated
here so ``runner.skills`` stays below ``runner.agent`` and ``runner.run`` in the import graph (the
reply's shape is ``runner.priced.PricedReply``, which the agent loop names too).
The caller builds the model (the run's auxiliary model, or ``runner.run.model_choice.side_model``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from runner.priced import PricedReply

SideReply = PricedReply  # a priced reply (``runner.agent.auxiliary.AuxReply``)


class SideModel(Protocol):
    def complete(
        self, messages: Sequence[dict[str, Any]], *, timeout: float | None = None, max_tokens: int | None = None
    ) -> SideReply:
        """One request without tools; raises a ``RunnerError`` (``ModelError``) when the model fails."""
        ...


ModelFactory = Callable[[], SideModel]  # built only when a side call is made
