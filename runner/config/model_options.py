"""``model_options:``: the request options of a chat call, per provider (config.yaml) and per job
(jobs.yaml); the job's options override the provider's, key by key (``extra_body`` and
``extra_headers`` are merged key by key too). Unknown keys are errors."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from runner.config.request_fields import REASONING_PREFIXES, MaxTokensField, max_tokens_key, request_fields
from runner.config.strict import Strict

__all__ = ["REASONING_PREFIXES", "MaxTokensField", "ModelOptions", "max_tokens_key", "request_fields"]


class ModelOptions(Strict):
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    seed: int | None = None
    reasoning_effort: str | None = Field(None, pattern=r"^[a-z]{1,16}$")
    response_format: dict[str, Any] | None = None
    extra_body: dict[str, Any] = Field(default_factory=dict)
    extra_headers: dict[str, str] = Field(default_factory=dict)

    def over(self, base: ModelOptions) -> ModelOptions:
        """These options on top of ``base`` (a provider's): set keys win, dicts merge."""
        merged = base.model_dump(exclude={"extra_body", "extra_headers"})
        merged.update(self.model_dump(exclude={"extra_body", "extra_headers"}, exclude_none=True))
        return ModelOptions(
            **merged,
            extra_body={**base.extra_body, **self.extra_body},
            extra_headers={**base.extra_headers, **self.extra_headers},
        )
