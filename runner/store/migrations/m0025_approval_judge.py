"""``approvals: smart`` (issue 32): the judge's part of an approval decision. ``judge`` the model
that was asked (NULL when none was: another policy, or no auxiliary model), ``judge_verdict``
approve | deny | escalate, ``judge_reason`` its one-line reason (or why there was no verdict)."""

from __future__ import annotations

from typing import Any


def apply(db: Any) -> None:
    for column in ("judge", "judge_verdict", "judge_reason"):
        db["approvals"].add_column(column, str)
