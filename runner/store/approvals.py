"""The approvals audit (``approvals``): one row per decision that was not ``safe``, with the
command redacted; under ``approvals: smart`` also the judge model, its verdict and its reason
(m0025). ``runner approvals list`` and the dashboard read it (``runner.store.queries``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from runner.clock import iso, utcnow
from runner.events import Approval, Emit, Event

if TYPE_CHECKING:
    from runner.safety.approval import Decision


def audit_recorder(
    store: Any, run_id: str, policy: str | None, emit: Emit, redact: Callable[[str], str]
) -> Callable[[str, Decision], None]:
    """How a run's gate records a decision: an ``approval`` event and an ``approvals`` row."""

    def record(command: str, decision: Decision) -> None:
        clean = redact(command)
        verdict = "approved" if decision.allowed else "denied"
        ruling = decision.ruling
        judge = (ruling.judge or None) if ruling is not None else None
        said = str(ruling.verdict) if ruling is not None else None
        why = redact(ruling.reason) if ruling is not None else None
        emit(
            Event.APPROVAL,
            Approval(clean, decision.level, list(decision.reasons), verdict, decision.decided_by, judge, said, why),
        )
        store.execute(
            "INSERT INTO approvals (run_id, ts, command, level, reasons, policy, decision, decided_by, "
            "judge, judge_verdict, judge_reason) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run_id,
                iso(utcnow()),
                clean,
                decision.level,
                json.dumps(list(decision.reasons)),
                None if policy is None else str(policy),  # a policy enum as its value
                verdict,
                decision.decided_by,
                judge,
                said,
                why,
            ),
        )

    return record
