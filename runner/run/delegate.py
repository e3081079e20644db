"""Subagents: the run side of ``delegate_task``.

A child is a fresh conversation (a short system prompt, the goal and the context the parent
gave) run by the same agent loop in a thread of the parent's process, on the parent's backend
and model. Each child is a run in the ledger (trigger ``delegate``, ``parent_run_id`` = the
parent) with its own events, transcript and output file (its summary). It gets:

- the parent's tools minus ``delegate_task`` (unless ``delegation.max_depth`` allows one more
  level), memory writes, ``skill_manage`` and the kanban tools; a model's ``toolsets`` list
  only narrows that;
- the parent's frozen approval gate (same policy and ``allow:``), audited under the child's run,
  asking one question at a time across the whole tree;
- an equal share of what is left of the parent's token and cost budget, the parent's remaining
  turns, and time up to the parent's own loop deadline (minus the grace reserve);
- the parent's stop event: a signal to the parent stops every child, which ends ``interrupted``.

At most ``delegation.max_children`` children run at once. When a child ends, its tokens and cost
are added to the parent's running totals, so the parent's budget checks and its ledger row count
them (a child's own row shows its share alone).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from runner.agent.loop import Limits, LoopResult, Pricing, Totals, grace_reserve, run_loop
from runner.agent.types import LLM, Usage
from runner.errors import RunnerError, failure_reason
from runner.events import Event, Failure, Prompt, RunFinished, RunStarted, SubagentFinished, SubagentStarted
from runner.host.procs import Cut, future_results
from runner.run.agent_output import live_counters
from runner.statuses import RunStatus, Trigger
from runner.store import ledger
from runner.store.approvals import audit_recorder
from runner.store.atomic import write_run_file
from runner.store.files import FileKind, keep
from runner.store.runs import Recorder
from runner.tools.delegate import ChildReport

if TYPE_CHECKING:
    from runner.config.jobs import Job
    from runner.safety.approval import Gate
    from runner.safety.redact import Redactor
    from runner.safety.result import ApprovalResult
    from runner.settings import Settings
    from runner.tools import ToolEntry
    from runner.tools.context import ToolContext

NEVER_FOR_CHILDREN = frozenset({"delegate_task", "skill_manage", "memory"})
NEVER_TOOLSETS = frozenset({"kanban"})
CHILD_SYSTEM = (
    "You are a subagent of the runner job {job!r}: another agent handed you one task. Work on it "
    "with the tools you have; nobody can answer questions. The working directory is {workdir}. "
    "When you are done, reply with a concise final summary of what you did and found (the paths, "
    "commands, numbers and open problems that matter): only that summary goes back to the agent "
    "that asked."
)


@dataclass
class Delegation:
    """A run's ``Delegator``: starts its children. ``tools`` are the parent's (set once they are
    chosen); ``limits`` and ``totals`` are those of the parent's current loop (``account``)."""

    settings: Settings
    job: Job
    run_id: str
    llm: LLM
    pricing: Pricing
    gate: Gate
    redactor: Redactor
    stop: threading.Event
    cut: Cut | None = None  # the parent's: a cancel ends the children's model requests too
    depth: int = 1  # the depth of the children this starts
    tools: Sequence[ToolEntry] = ()
    limits: Limits = field(default_factory=Limits)
    totals: Totals = field(default_factory=Totals)
    approvals: threading.Lock = field(default_factory=threading.Lock)  # shared by the whole tree

    def account(self, limits: Limits, totals: Totals) -> None:
        self.limits, self.totals = limits, totals

    def delegate(
        self, goals: Sequence[str], context: str, toolsets: Sequence[str] | None, ctx: ToolContext
    ) -> list[ChildReport]:
        """Run one child per goal (``max_children`` at a time); their reports in the goals' order."""
        limits = self.share(len(goals))
        spec = self.job.spec.delegation
        pool = ThreadPoolExecutor(max_workers=min(spec.max_children, len(goals)), thread_name_prefix="subagent")
        try:
            futures = [pool.submit(self._child, goal, context, toolsets, ctx, limits) for goal in goals]
            return future_results(futures, first_exception=True)  # a signal to the run is handled meanwhile
        finally:
            pool.shutdown(wait=not self.stop.is_set(), cancel_futures=True)

    def share(self, n: int) -> Limits:
        """A child's limits: an equal ``n``-th of the parent's remaining tokens and cost, the
        parent's remaining turns, and time until the parent's loop deadline."""
        lim, spent = self.limits, self.totals
        tokens = None
        if lim.max_tokens is not None:
            tokens = max(1, (lim.max_tokens - spent.prompt - spent.completion) // n)
        cost = None if lim.max_cost_usd is None else max(0.0, (lim.max_cost_usd - spent.cost) / n)
        end = lim.deadline
        deadline = None if end is None else end - grace_reserve(max(0.0, end - time.monotonic()))
        return Limits(
            max_iterations=max(1, lim.max_iterations - spent.iterations),
            deadline=deadline,
            hard_deadline=end,
            idle_timeout=lim.idle_timeout,
            max_tokens=tokens,
            max_cost_usd=cost,
            allow_truncated=lim.allow_truncated,
        )

    def child_tools(self, requested: Sequence[str] | None) -> list[ToolEntry]:
        """The parent's tools a child may have, narrowed to ``requested`` when given."""
        can_delegate = self.depth < self.job.spec.delegation.max_depth
        tools = [
            t
            for t in self.tools
            if t.toolset not in NEVER_TOOLSETS
            and (t.name not in NEVER_FOR_CHILDREN or (t.name == "delegate_task" and can_delegate))
        ]
        if requested is not None:
            wanted = set(requested)
            tools = [t for t in tools if t.toolset in wanted or t.name in wanted]
        return tools

    def _child(
        self, goal: str, context: str, toolsets: Sequence[str] | None, ctx: ToolContext, limits: Limits
    ) -> ChildReport:
        if self.stop.is_set():  # stopped while this goal waited for a free slot: no child, no row
            return ChildReport("-", str(RunStatus.INTERRUPTED), "", "interrupted", 0, 0, 0.0)
        store = self.settings.store
        child_id = ledger.open_run(store, job=self.job.name, trigger=Trigger.DELEGATE, parent_run_id=self.run_id)
        emit = Recorder(store, child_id, self.redactor)
        parent_emit = ctx.emit
        parent_emit(Event.SUBAGENT_STARTED, SubagentStarted(child_id, goal[:500], self.depth))
        child = _Child(self, child_id, emit)
        result = child.run(goal, context, toolsets, ctx, limits)
        self.totals.add(result.usage, result.cost_usd)
        report = ChildReport(
            child_id,
            str(result.status),
            self.redactor(result.output),
            result.reason,
            result.iterations,
            result.usage.prompt_tokens + result.usage.completion_tokens,
            result.cost_usd,
        )
        finished = SubagentFinished(child_id, report.status, report.reason, report.tokens, report.cost_usd)
        parent_emit(Event.SUBAGENT_FINISHED, finished)
        return report


@dataclass
class _Child:
    """One child run from its ledger row to its final status."""

    parent: Delegation
    run_id: str
    emit: Recorder

    def run(
        self, goal: str, context: str, toolsets: Sequence[str] | None, ctx: ToolContext, limits: Limits
    ) -> LoopResult:
        p = self.parent
        result = LoopResult(
            RunStatus.FAILED, "", 0, Usage(0, 0), 0.0, reason="error", error="the subagent did not start"
        )
        messages: list[dict[str, Any]] = []
        try:
            tools = p.child_tools(toolsets)
            totals = Totals()
            child_ctx = self.context(ctx, tools, limits, totals)
            messages = self.first_messages(goal, context, ctx.workdir)
            started = RunStarted(p.job.name, Trigger.DELEGATE, parent_run_id=p.run_id, depth=p.depth)
            self.emit(Event.RUN_STARTED, started)
            self.emit(Event.PROMPT, Prompt(messages[1]["content"][:4000], [t.name for t in tools], p.llm.model))
            result = run_loop(
                messages,
                tools,
                child_ctx,
                p.llm,
                limits,
                emit=self.emit,
                pricing=p.pricing,
                stop=p.stop,
                redact=p.redactor,
                totals=totals,
                cut=p.cut,
                report=live_counters(p.settings.store, self.run_id),
            )
        except RunnerError as exc:  # a dead backend or the model gone: this child fails, the parent hears it
            error = p.redactor(str(exc))
            self.emit(Event.ERROR, Failure(failure_reason(exc), error))
            result = replace(result, reason=failure_reason(exc), error=error)
            if p.stop.is_set():  # the parent was stopped and closed the backend under the child
                result = replace(result, status=RunStatus.INTERRUPTED, reason="interrupted")
        finally:
            self.finish(result, messages)
        return result

    def context(self, ctx: ToolContext, tools: Sequence[ToolEntry], limits: Limits, totals: Totals) -> ToolContext:
        """The parent's context with the child's run, events, gate and (one level deeper) delegator."""
        p = self.parent
        gate = replace(
            p.gate, record=audit_recorder(p.settings.store, self.run_id, p.gate.policy, self.emit, p.redactor)
        )
        nested = None
        if any(t.name == "delegate_task" for t in tools):
            nested = replace(p, run_id=self.run_id, depth=p.depth + 1, tools=tools, gate=gate)
            nested.account(limits, totals)
        return replace(
            ctx,
            run_id=self.run_id,
            emit=self.emit,
            approve=_one_at_a_time(gate, p.approvals),
            approve_tool=gate.tool,  # MCP and operator tools: audited under the child
            kanban=None,
            checkpoints=None,  # the parent's checkpoint before its delegate_task call covers the child's changes
            delegate=nested,
            deadline=limits.deadline if limits.deadline is not None else ctx.deadline,  # its commands end in its time
        )

    def first_messages(self, goal: str, context: str, workdir: str) -> list[dict[str, Any]]:
        system = CHILD_SYSTEM.format(job=self.parent.job.name, workdir=workdir)
        user = goal if not context.strip() else f"{goal}\n\nContext from the agent that asked:\n{context}"
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def finish(self, result: LoopResult, messages: list[dict[str, Any]]) -> None:
        """The child's summary, transcript and final row; always (from ``run``'s ``finally``)."""
        p = self.parent
        home = p.settings.home
        output = p.redactor(result.output)
        path = None

        if output:
            path = home / "outputs" / p.job.name / f"{self.run_id}.md"
            write_run_file(path, output)
            keep(p.settings.store, self.run_id, FileKind.OUTPUT, output)
        if messages:
            import json

            transcript = json.dumps(p.redactor.redact_obj(messages), ensure_ascii=False, indent=1)
            write_run_file(home / "logs" / "runs" / f"{self.run_id}.json", transcript)
            keep(p.settings.store, self.run_id, FileKind.TRANSCRIPT, transcript)
        ledger.set_fields(
            p.settings.store,
            self.run_id,
            model=p.llm.model,
            iterations=result.iterations,
            prompt_tokens=result.usage.prompt_tokens,
            completion_tokens=result.usage.completion_tokens,
            cached_tokens=result.usage.cached_tokens,
            cost_usd=result.cost_usd,
        )
        ledger.finish(
            p.settings.store,
            self.run_id,
            RunStatus(result.status),
            reason=result.reason,
            error=result.error,
            output_path=str(path) if path else None,
        )
        self.emit(Event.RUN_FINISHED, RunFinished(result.status, result.reason))


def _one_at_a_time(gate: Gate, lock: threading.Lock) -> Any:
    def approve(command: str) -> ApprovalResult:
        with lock:
            return gate(command)

    return approve
