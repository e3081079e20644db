"""``model_options:``: the request options of a chat call, per provider (config.yaml) and per job
(jobs.yaml); the job's options override the provider's, key by key (``extra_body`` and
``extra_headers`` are merged key by key too). Unknown keys are errors."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from runner.config.strict import Strict

# Models that take ``max_completion_tokens`` and refuse ``max_tokens`` (OpenAI's reasoning models)
REASONING_PREFIXES = ("o1", "o3", "o4", "gpt-5")
MaxTokensField = Literal["auto", "max_tokens", "max_completion_tokens"]


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


def max_tokens_key(field: MaxTokensField, model: str) -> str:
    """The request key that carries the output token limit: ``max_completion_tokens`` for
    OpenAI's reasoning models (o1, o3, o4, gpt-5...) with ``auto``, else ``max_tokens``."""
    if field != "auto":
        return field
    name = model.rpartition("/")[2].lower()
    return "max_completion_tokens" if name.startswith(REASONING_PREFIXES) else "max_tokens"


def request_fields(options: ModelOptions, *, model: str, field: MaxTokensField) -> dict[str, Any]:
    """The JSON body fields the options add to a request (``extra_body`` last, as given)."""
    out: dict[str, Any] = {}
    for key in ("temperature", "top_p", "seed", "reasoning_effort", "response_format"):
        value = getattr(options, key)
        if value is not None:
            out[key] = value
    if options.max_tokens is not None:
        out[max_tokens_key(field, model)] = options.max_tokens
    return out
