"""The skill review step of an agent run (``skills_review:``), after the loop and before the output is written.

``review_run`` decides whether the run is reviewed (``runner.skills.review.skip_reason``), asks the
auxiliary model (else the run's own) once, counts the reply's tokens and cost in the run's totals
(so the run row, ``runs show`` and the budget settlement include it) and records it as a
``skill_review`` event with its cost and outcome. Whatever goes wrong in the review is a
``skill_review_failed`` event and a warning on the ``runner.review`` logger; the run keeps its status.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from runner.agent.auxiliary import Priced
from runner.agent.loop import LoopResult
from runner.agent.types import Usage
from runner.errors import RunnerError
from runner.events import Error, Event, ReviewSkipped, SideCall
from runner.run.request import Replay, RunScope
from runner.skills.review import apply, count_tool_calls, review, skip_reason
from runner.skills.session import SkillSession
from runner.statuses import RunStatus

if TYPE_CHECKING:
    from runner.run.model_source import Connected
    from runner.skills.review import Decision
    from runner.skills.sidecall import PricedReply

MIN_SECONDS = 2.0  # with less time left before the run's deadline there is no review


def wanted(run: RunScope) -> bool:
    if run.req.review:
        return True
    own = run.job.spec.skills_review
    return run.settings.config.skills_review.enabled if own is None else own


def review_run(
    run: RunScope,
    messages: list[dict[str, Any]],
    result: LoopResult,
    connected: Connected,
    skills: SkillSession | None,
    *,
    max_cost_usd: float | None = None,
) -> LoopResult:
    """``result`` with the review's tokens and cost added (unchanged when there was no review).

    ``max_cost_usd``: the run's cost cap; a run that has spent it (or its ``budget.max_tokens``) is
    not reviewed."""

    if not wanted(run):
        return result
    cfg = run.settings.config.skills_review
    calls = count_tool_calls(messages)
    why = skip_reason(
        wanted=True,
        succeeded=result.status == RunStatus.SUCCEEDED,
        tool_calls=calls,
        min_tool_calls=cfg.min_tool_calls,
        replay=isinstance(run.req.model, Replay),
        replays=cfg.replays or run.req.review,
    )
    left = run.deadline - time.monotonic()
    max_tokens = run.job.spec.budget.max_tokens
    if not why and left < MIN_SECONDS:
        why = f"{max(left, 0):.1f}s left before the run's timeout"
    elif not why and max_cost_usd is not None and result.cost_usd >= max_cost_usd:
        why = f"the run's cost budget (${max_cost_usd:.2f}) is used up"
    elif (
        not why and max_tokens is not None and result.usage.prompt_tokens + result.usage.completion_tokens >= max_tokens
    ):
        why = f"the run's token budget ({max_tokens}) is used up"
    if why:
        run.emit(Event.SKILL_REVIEW_SKIPPED, ReviewSkipped(why, calls))
        return result
    try:
        return _review(run, messages, result, connected, skills, left)
    except Exception as exc:  # noqa: BLE001 - a review never costs the run its status; recorded below
        _failed(run, f"{type(exc).__name__}: {exc}")
        return result


def _review(
    run: RunScope,
    messages: list[dict[str, Any]],
    result: LoopResult,
    connected: Connected,
    skills: SkillSession | None,
    left: float,
) -> LoopResult:
    session = skills if skills is not None else SkillSession.for_run(run.settings, emit=run.emit)
    model = connected.auxiliary or Priced(connected.llm, connected.pricing)
    cfg = run.settings.config.skills_review
    try:
        reply, decided = review(model, session, messages, timeout=left - 1.0, max_tokens=cfg.max_tokens)
    except (RunnerError, OSError) as exc:
        _failed(run, str(exc))
        return result
    counted = _counted(result, reply)
    if isinstance(decided, Exception):
        _event(run, reply, "failed", None)
        _failed(run, str(decided))
        return counted
    try:
        change = apply(decided, session)
    except (RunnerError, OSError) as exc:
        _event(run, reply, "failed", decided)
        _failed(run, str(exc))
        return counted
    _event(run, reply, change.action if change is not None else "none", decided, change.message if change else "")
    return counted


def _counted(result: LoopResult, reply: PricedReply) -> LoopResult:
    usage = Usage(
        result.usage.prompt_tokens + reply.usage.prompt_tokens,
        result.usage.completion_tokens + reply.usage.completion_tokens,
        result.usage.cached_tokens + reply.usage.cached_tokens,
    )
    return replace(result, usage=usage, cost_usd=round(result.cost_usd + reply.cost_usd, 6))


def _event(run: RunScope, reply: PricedReply, outcome: str, decision: Decision | None, message: str = "") -> None:
    """The review's reply: its cost (counted by the budget settlement, like ``summary``) and outcome."""
    usage = reply.usage
    run.emit(
        Event.SKILL_REVIEW,
        SideCall(
            reply.model,
            reply.provider,
            usage.prompt_tokens,
            usage.completion_tokens,
            round(reply.cost_usd, 6),
            outcome=outcome,  # create | patch | none | failed
            name=decision.name if decision is not None else "",
            why=decision.why if decision is not None else "",
            message=message,
        ),
    )


def _failed(run: RunScope, error: str) -> None:
    run.emit(Event.SKILL_REVIEW_FAILED, Error(error))
    import logging  # only here: a run that is not reviewed does not load it (~5 ms a start)

    log = logging.getLogger("runner.review")
    log.warning("run %s (job %s): skill review failed: %s", run.run_id, run.job.name, error)
