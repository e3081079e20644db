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


@dataclass(frozen=True)
class ToolCheck:
    """A call of a tool that is not a shell command (an MCP server's tool) for the gate to decide."""

    tool: str  # the name the model called
    level: str  # "safe" | "dangerous": what its annotations and config.yaml say
    reason: str  # why it is dangerous, for the audit and the model
    payloads: tuple[str, ...] = ()  # every string value in the arguments: a hardline one is refused
    summary: str = ""  # the call as the audit shows it (redacted there)


ToolApproveFn = Callable[[ToolCheck], ApprovalResult]
