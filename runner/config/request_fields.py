"""The request body fields of ``model_options:`` (``runner.config.model_options``), without pydantic."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from runner.config.model_options import ModelOptions

# Models that take ``max_completion_tokens`` and refuse ``max_tokens`` (OpenAI's reasoning models)
REASONING_PREFIXES = ("o1", "o3", "o4", "gpt-5")
MaxTokensField = Literal["auto", "max_tokens", "max_completion_tokens"]


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
