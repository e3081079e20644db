"""What the approval gate answers for one command: the seam between the policy and the tools.

Kept apart from approval.py so the tools (and ``runner jobs list``, which discovers them) do not
load the shell classifier just to name this type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ApprovalResult:
    allowed: bool
    message: str = ""  # what the model is told when the command is not allowed


ApproveFn = Callable[[str], ApprovalResult]
