"""How much a job's runs may do without a person deciding, and whether one job's is wider than
another's: a run may hand work (a kanban task) only to jobs whose latitude is no wider than its
own, so a ``deny`` job cannot get a command run by filing a task for an ``approve`` job.

Wider means: a looser ``approvals:`` (``deny`` < ``manual`` < ``smart`` < ``approve``: ``manual`` lets
a person approve, ``smart`` lets the judge model approve, ``approve`` lets everything through), an ``allow:`` pattern (it approves matching
dangerous commands under any policy) that the other job's list does not hold, or ``sandbox: off``
on the local backend (its commands run as the runner's own user) where the other job's run in the
sandbox.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Approvals(StrEnum):
    """A job's ``approvals:``, strictest first."""

    DENY = "deny"
    MANUAL = "manual"
    SMART = "smart"  # the judge model (config.yaml's ``auxiliary:``) decides; escalate waits for a person
    APPROVE = "approve"

    @property
    def rank(self) -> int:
        return list(Approvals).index(self)


@dataclass(frozen=True)
class Latitude:
    """A job's ``approvals:`` and ``allow:`` patterns, and whether its local commands run unsandboxed."""

    approvals: Approvals
    allow: frozenset[str]
    unsandboxed: bool = False

    @classmethod
    def of(cls, spec: Any) -> Latitude:
        """The latitude of a job's spec."""
        unsandboxed = spec.backend.type == "local" and not spec.sandbox.enabled
        return cls(Approvals(spec.approvals), frozenset(spec.allow), unsandboxed)

    def wider_than(self, other: Latitude) -> str | None:
        """Why this latitude is wider than ``other``'s, or None when it is not."""
        if self.approvals.rank > other.approvals.rank:
            return f"approvals: {self.approvals} is looser than approvals: {other.approvals}"
        if self.unsandboxed and not other.unsandboxed:
            return "sandbox: off runs its commands as the runner's own user"
        extra = sorted(self.allow - other.allow)
        if extra:
            shown = ", ".join(repr(p) for p in extra[:3]) + (" ..." if len(extra) > 3 else "")
            return f"allow: {shown} is not in the other job's allow: list"
        return None
