"""The base of every config model: unknown keys are errors, values are immutable once read."""

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
