"""The base of every config model: unknown keys are errors, values are immutable once read.

``defer_build``: a model's validator is built when it first validates, not at import, so a
command that imports the models without reading every kind of file pays only for what it reads.
"""

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
