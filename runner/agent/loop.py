"""The agent loop: a function of (messages, tools, llm, limits).

Ask the model; run the tool calls it makes, in order, each result going back as a message;
stop on a final text answer. A turn whose calls are all read-only tools (``ToolEntry.read_only``)
runs them concurrently (at most ``MAX_PARALLEL``); their events and results keep the model's order. Limits end the loop with a recorded reason through small
exception classes; tool problems become tool results the model can act on; infrastructure
errors (BackendError, ModelError) propagate and end the run. Messages sent to the run while it
works (steering: ``Steering``) join the conversation as user messages at the top of a turn, before
its model request: never between an assistant turn's tool calls and their results.
"""

from __future__ import annotations

import contextvars
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Protocol

from runner.agent.history import history_problem
from runner.agent.schema import check_args
from runner.agent.tracing import NOOP, Span, Tracer
from runner.agent.types import LLM, Message, ToolCall, Usage, arguments_value
from runner.errors import ModelError, RunnerError
from runner.events import (
    Detail,
    Emit,
    Error,
    Event,
    Grace,
    InvalidHistory,
    Limit,
    Request,
    Response,
    SideCall,
    Steer,
    ToolResult,
    Truncated,
)
from runner.events import ToolCall as CallEvent
from runner.host.procs import Cut, future_results, wait_or_cut
from runner.safety.result import ApprovalResult, ApproveFn
from runner.skills.sidecall import PricedReply, Tokens
from runner.statuses import RunStatus
from runner.tools import ToolEntry, ToolError
from runner.tools.context import ToolContext

Spent = PricedReply  # a side call's reply, already priced (``runner.agent.auxiliary.AuxReply``)

Prune = Callable[[list[dict[str, Any]]], Sequence[Spent]]

GRACE_PROMPT = (
    "You have reached the limit for this run ({why}). Do not call any tools. Reply now with your "
    "final answer: what you found and did so far, and what is left undone."
)
GRACE_TIMEOUT = 30.0  # seconds the grace call may take at most (and never past the hard deadline)
GRACE_MAX_TOKENS = 1024  # the partial answer is a short report
GRACE_MIN_SECONDS = 0.5  # with less time than this before the hard deadline there is no grace call
GRACE_RESERVE_MAX = 60.0
LOOP_REPEATS = 3
PREVIEW_CHARS = 2000
MAX_PARALLEL = 8  # read-only calls of one turn running at once
NOT_RUN = "not run: the run was interrupted"
STEER_PROMPT = "A message from {by}, sent to you while you work on this run:\n\n{text}"


class Steering(Protocol):
    """Where messages sent to the running run wait (``runner.run.steer.Inbox``)."""

    def take(self) -> Sequence[Steer]:
        """The messages waiting, oldest first (each is taken once)."""
        ...


class Journal(Protocol):
    """The run's journal of completed steps (``runner.run.journal.Journal``): the loop answers a
    turn from it before asking the model and takes a call's result from it before running the
    tool; each new step is written with its event, in one transaction."""

    def reply(self, turn: int) -> Message | None:
        """The journaled answer of model turn ``turn``, or None."""
        ...

    def replayed(self, usage: Usage, cost: float) -> None:
        """What a replayed turn had cost (counted in the limits, not spent again)."""
        ...

    def result(self, turn: int, call: ToolCall) -> Recall | None:
        """The journaled result of a call, or None (run it)."""
        ...

    def step_key(self, turn: int, index: int) -> str:
        """The idempotency key of call ``index`` of turn ``turn`` (``RUNNER_STEP_KEY``)."""
        ...

    def answered(self, turn: int, messages: int, reply: Message, event: Callable[[], None]) -> None: ...

    def replaying(self, turn: int) -> bool:
        """Whether model turn ``turn`` is answered from the journal."""
        ...

    def steers(self, turn: int) -> Sequence[Steer]:
        """The messages journaled as given to the model before the request of ``turn``."""
        ...

    def steered(self, turn: int, steers: Sequence[Steer], event: Callable[[], None]) -> None: ...

    def started(self, turn: int, call: ToolCall, event: Callable[[], None]) -> None: ...

    def finished(self, turn: int, call: ToolCall, result: str, failed: bool, event: Callable[[], None]) -> None: ...


@dataclass(frozen=True)
class Recall:
    """A tool call's journaled result; ``unknown``: it was started but never finished (the text
    tells the model so)."""

    text: str
    failed: bool
    unknown: bool = False


class LoopExit(Exception):
    """Ends the loop early with a recorded reason; ``grace``: ask the model once, without tools,
    for a report of what was done and what is left (the run's partial answer)."""

    status = RunStatus.FAILED
    grace = True

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(detail or reason)
        self.reason = reason
        self.detail = detail or reason


class LimitsExceeded(LoopExit):
    pass


class TimedOut(LoopExit):
    status = RunStatus.TIMED_OUT


class LoopDetected(LoopExit):
    pass


class Interrupted(LoopExit):
    status = RunStatus.INTERRUPTED
    grace = False  # a signal means stop now


class Unusable(LoopExit):
    """The model's answer cannot stand as the run's result: a refusal, a content filter, an
    answer cut at the token limit. No grace call (the model would answer the same way); the
    text it did give is the run's output and is named in the error (and so in the alert)."""

    grace = False

    def __init__(self, reason: str, detail: str, output: str):
        super().__init__(reason, detail)
        self.output = output


EXCERPT_CHARS = 300


def _unusable(reply: Message, allow_truncated: bool) -> Unusable | None:
    """Why ``reply`` cannot be the run's answer, or None."""
    text = reply.content or ""
    if reply.refusal and not reply.tool_calls:
        return Unusable("refused", f"the model refused: {_excerpt(reply.refusal)}", reply.refusal)
    if reply.finish_reason == "refusal":
        return Unusable("refused", f"the model refused: {_excerpt(text) or '(no text)'}", text)
    if reply.finish_reason == "content_filter":
        said = f"; its partial answer: {_excerpt(text)}" if text else ""
        return Unusable("content_filter", f"the provider's content filter stopped the answer{said}", text)
    if reply.finish_reason == "length" and (reply.tool_calls or not allow_truncated):
        what = "a tool call's arguments" if reply.tool_calls else "the answer"
        return Unusable(
            "truncated",
            f"the model hit its output token limit: {what} was cut (set max_tokens higher, or "
            "allow_truncated: true to accept cut answers)",
            text,
        )
    return None


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 3] + "..."


def grace_reserve(timeout: float) -> float:
    """Seconds kept back at the end of a run's wall timeout for the grace call:
    min(60 s, 10% of the timeout)."""
    return min(GRACE_RESERVE_MAX, 0.1 * timeout)


@dataclass(frozen=True)
class Limits:
    max_iterations: int = 30
    deadline: float | None = None  # time.monotonic() when the loop stops (the grace reserve is after it)
    hard_deadline: float | None = None  # when the run must end; the grace call ends by then (default: deadline)
    idle_timeout: float | None = None
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    allow_truncated: bool = False  # an answer cut at the output token limit ends the run as a success


@dataclass(frozen=True)
class Pricing:
    input_per_mtok: float = 0.0
    output_per_mtok: float = 0.0
    cached_input_per_mtok: float | None = None  # None: cached prompt tokens cost input_per_mtok
    cache_write_per_mtok: float | None = None  # prompt tokens written to the cache; None: input_per_mtok

    def cost(self, usage: Usage) -> float:
        cached = min(usage.cached_tokens, usage.prompt_tokens)
        written = min(usage.cache_write_tokens, usage.prompt_tokens - cached)
        cached_rate = self.input_per_mtok if self.cached_input_per_mtok is None else self.cached_input_per_mtok
        write_rate = self.input_per_mtok if self.cache_write_per_mtok is None else self.cache_write_per_mtok
        fresh = usage.prompt_tokens - cached - written
        return (
            fresh * self.input_per_mtok
            + cached * cached_rate
            + written * write_rate
            + usage.completion_tokens * self.output_per_mtok
        ) / 1e6


@dataclass(frozen=True)
class LoopResult:
    status: RunStatus  # succeeded | failed | timed_out | interrupted
    output: str
    iterations: int
    usage: Usage
    cost_usd: float
    reason: str | None = None
    error: str | None = None


@dataclass
class Totals:
    """What a loop has spent so far. Its tokens and cost also count what its subagents spent
    (``add``, called from their threads when each ends), so the budget checks see both."""

    prompt: int = 0
    completion: int = 0
    cached: int = 0
    cost: float = 0.0
    iterations: int = 0
    last_progress: float = field(default_factory=time.monotonic)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def usage(self) -> Usage:
        return Usage(self.prompt, self.completion, self.cached)

    def add(self, usage: Usage, cost: float) -> None:
        with self._lock:
            self.prompt += usage.prompt_tokens
            self.completion += usage.completion_tokens
            self.cached += usage.cached_tokens
            self.cost += cost


@dataclass
class SideAccount:
    """Priced side calls made outside a loop's own turns (the smart-approval judge, asked from a
    tool call, or before the loop for ``pre_run``): charged to the loop running then (``bind``),
    else held for the next one, so the run's tokens, cost and budget checks count them."""

    _totals: Totals | None = None
    _held: list[tuple[Usage, float]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def bind(self, totals: Totals) -> None:
        """Charge ``totals`` from now on, and with what was held until now."""
        with self._lock:
            self._totals = totals
            held, self._held = self._held, []
        for usage, cost in held:
            totals.add(usage, cost)

    def add(self, usage: Usage, cost: float) -> None:
        with self._lock:
            totals = self._totals
            if totals is None:
                self._held.append((usage, cost))
                return
        totals.add(usage, cost)


class Report(Protocol):
    """Told what the loop has spent so far after each model reply (the run's live counters:
    ``runner.run.agent_output`` writes them to the ledger); called on the loop's own thread."""

    def __call__(self, totals: Totals) -> None: ...


def run_loop(
    messages: list[dict[str, Any]],
    tools: Sequence[ToolEntry],
    ctx: ToolContext,
    llm: LLM,
    limits: Limits,
    *,
    emit: Emit,
    pricing: Pricing = Pricing(),
    stop: threading.Event | None = None,
    prune: Prune | None = None,
    redact: Callable[[str], str] | None = None,
    totals: Totals | None = None,
    tracer: Tracer = NOOP,
    cut: Cut | None = None,
    steering: Steering | None = None,
    report: Report | None = None,
    journal: Journal | None = None,
) -> LoopResult:
    """Run the conversation in ``messages`` (mutated in place) to a final answer or a limit.

    ``redact`` masks secrets in every tool result before the model (and the record) sees it.
    ``prune`` returns the model replies it asked for (summaries): they count in the run's
    tokens, cost and budgets. ``totals``: the account to charge (a fresh one by default; the
    caller passes its own when subagents charge it too). ``tracer``: a span per model call and
    per tool call (children of the caller's current span). ``cut``: once set (with ``stop``), the
    model request being waited for is given up and the tool call's result is marked cut (its
    command was ended by the backend). ``steering``: messages sent to the run, each added as a
    user message (and a ``steered`` event) before the next model request. ``report``: told the
    totals after each model reply. ``journal``: the run's journal: turns and results it holds
    are replayed, every new one is written to it."""
    stop = stop or threading.Event()
    by_name = {t.name: t for t in tools}
    schemas = [t.schema() for t in tools]
    totals = totals if totals is not None else Totals()
    recent_failures: list[str] = []
    try:
        while True:
            _check(limits, totals, stop, cut)
            if totals.iterations >= limits.max_iterations:
                raise LimitsExceeded("max_iterations", f"reached max_iterations ({limits.max_iterations})")
            if steering is not None or journal is not None:
                _steer(steering, messages, emit, journal, totals.iterations + 1)
            if prune is not None:
                _charge_summaries(prune(messages), totals, emit)
                _check(limits, totals, stop, cut)
            with tracer.span("model call", {"runner.iteration": totals.iterations + 1}) as span:
                reply = _ask(llm, messages, schemas, limits, totals, emit, pricing, cut, journal)
                _describe(span, llm, reply)
            if report is not None:
                report(totals)
            messages.append(reply.to_dict())
            unusable = _unusable(reply, limits.allow_truncated)
            if unusable is not None:
                raise unusable
            if not reply.tool_calls:
                return _done(RunStatus.SUCCEEDED, reply.answer, totals)
            turn = totals.iterations
            recalled = [journal.result(turn, call) if journal is not None else None for call in reply.tool_calls]
            batch = None
            if not any(recalled):
                batch = _run_parallel(reply.tool_calls, by_name, ctx, emit, redact, stop, tracer, cut, journal, turn)
            guard = ctx.checkpoints if batch is None else None  # a checkpoint before the turn's first change
            for i, call in enumerate(reply.tool_calls):
                known = recalled[i]
                if batch is not None:
                    result, failed = batch[i]
                elif known is not None and not known.unknown:
                    result, failed = known.text, known.failed  # journaled: not run again
                elif known is not None:  # started, never finished: the model is told, nothing runs
                    result, failed = known.text, True
                    _settle(journal, turn, call, partial(_announce, call, emit))
                    _settle(journal, turn, call, partial(_report, call, result, True, 0.0, emit), result, True)
                elif stop.is_set():
                    result, failed = NOT_RUN, True
                else:
                    if guard is not None and _may_change_files(call, by_name):
                        guard.before_mutation(totals.iterations, call.name)
                        guard = None
                    keyed = _keyed(ctx, journal, turn, i)
                    result, failed = _run_tool(call, by_name, keyed, emit, redact, tracer, cut, journal, turn)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
                totals.last_progress = time.monotonic()
                recent_failures = _track_loop(recent_failures, call, failed)
            _check(limits, totals, stop, cut)
    except LoopExit as exit_:
        emit(Event.LIMIT, Limit(exit_.reason, exit_.detail))
        output = exit_.output if isinstance(exit_, Unusable) else ""
        if exit_.grace:
            if prune is not None:
                _charge_summaries(prune(messages), totals, emit)
            output = _grace(llm, messages, limits, totals, emit, pricing, exit_)
        return _done(exit_.status, output, totals, reason=exit_.reason, error=exit_.detail)


def _steer(
    steering: Steering | None, messages: list[dict[str, Any]], emit: Emit, journal: Journal | None, turn: int
) -> None:
    """The messages sent to the run since the last turn, as user messages (the last message is
    the user prompt or a tool result: every call of the last turn has its result by now), before
    the request of model ``turn``. A resumed run first puts back those its journal holds for that
    turn (an earlier attempt gave them); a turn answered from the journal takes no new ones (its
    request had only those). New ones are journaled with their events."""
    recalled = list(journal.steers(turn)) if journal is not None else []
    for steer in recalled:
        messages.append({"role": "user", "content": STEER_PROMPT.format(by=steer.by, text=steer.text)})
    if steering is None or (journal is not None and journal.replaying(turn)):
        return
    taken = list(steering.take())
    if not taken:
        return

    def given() -> None:
        for steer in taken:
            emit(Event.STEERED, steer)

    if journal is None:
        given()
    else:
        journal.steered(turn, [*recalled, *taken], given)
    for steer in taken:
        messages.append({"role": "user", "content": STEER_PROMPT.format(by=steer.by, text=steer.text)})


def _done(status: RunStatus, output: str, totals: Totals, **kw: Any) -> LoopResult:
    return LoopResult(status, output, totals.iterations, totals.usage(), round(totals.cost, 6), **kw)


def _check(limits: Limits, totals: Totals, stop: threading.Event, cut: Cut | None = None) -> None:
    now = time.monotonic()
    if cut is not None and cut.is_set():
        raise Interrupted("interrupted", "the run's current step was cut (cancelled, or declared lost)")
    if stop.is_set():
        raise Interrupted("interrupted", "the run was interrupted by a signal")
    if limits.deadline is not None and now >= limits.deadline:
        raise TimedOut("timeout", "the run's wall-clock timeout was reached")
    if limits.idle_timeout is not None and now - totals.last_progress >= limits.idle_timeout:
        raise TimedOut("idle_timeout", f"no model or tool progress for {limits.idle_timeout:.0f}s")
    if limits.max_tokens is not None and totals.prompt + totals.completion >= limits.max_tokens:
        raise LoopExit("budget_tokens", f"token budget of {limits.max_tokens} used up")
    if limits.max_cost_usd is not None and totals.cost >= limits.max_cost_usd:
        raise LoopExit("budget_cost", f"cost budget of ${limits.max_cost_usd:.2f} used up")


def _ask(
    llm: LLM,
    messages: list[dict[str, Any]],
    schemas: list[dict[str, Any]],
    limits: Limits,
    totals: Totals,
    emit: Emit,
    pricing: Pricing,
    cut: Cut | None = None,
    journal: Journal | None = None,
) -> Message:
    """One model turn within the loop's deadline (a model error past it, or past the idle timeout,
    is that limit). The idle timeout is the client's to measure on the progress of its stream
    (``ChatClient(idle_timeout=...)``): a long generation that keeps sending is not cut by it."""
    timeout = None if limits.deadline is None else max(1.0, limits.deadline - time.monotonic())
    try:
        return _call(llm, messages, schemas, totals, emit, pricing, timeout=timeout, cut=cut, journal=journal)
    except ModelError:
        now = time.monotonic()
        if limits.deadline is not None and now >= limits.deadline:
            raise TimedOut("timeout", "the run's wall-clock timeout was reached while waiting for the model") from None
        if limits.idle_timeout is not None and now - totals.last_progress >= limits.idle_timeout:
            raise TimedOut(
                "idle_timeout", f"the model did not answer within idle_timeout ({limits.idle_timeout:.0f}s)"
            ) from None
        raise


def _call(
    llm: LLM,
    messages: list[dict[str, Any]],
    schemas: list[dict[str, Any]],
    totals: Totals,
    emit: Emit,
    pricing: Pricing,
    *,
    timeout: float | None,
    max_tokens: int | None = None,
    cut: Cut | None = None,
    journal: Journal | None = None,
) -> Message:
    """Send one request, record it and its answer, and count the answer's tokens and cost. A
    history the API would reject is never sent (``invalid_history``). A turn the ``journal``
    holds is its answer: the model is not asked, its tokens and cost count in the limits again."""
    journaled = journal.reply(totals.iterations + 1) if journal is not None else None
    if journaled is not None:
        totals.iterations += 1
        cost = _charge(totals, journaled, pricing)
        if journal is not None:
            journal.replayed(journaled.usage, cost)
        return journaled
    problem = history_problem(messages)
    if problem is not None:
        emit(Event.INVALID_HISTORY, InvalidHistory(problem, len(messages)))
        raise ModelError(f"the conversation is not valid to send: {problem}", reason="invalid_history")
    emit(Event.REQUEST, Request(totals.iterations + 1, len(messages), len(schemas)))
    started = time.monotonic()
    extra = {} if max_tokens is None else {"max_tokens": max_tokens}
    if cut is None:
        reply = llm.complete(messages, schemas, timeout=timeout, **extra)
    else:
        reply = _complete_or_cut(lambda: llm.complete(messages, schemas, timeout=timeout, **extra), cut, emit)
    totals.iterations += 1
    cost = _charge(totals, reply, pricing)
    response = partial(
        emit,
        Event.RESPONSE,
        Response(
            iteration=totals.iterations,
            content=reply.content,
            tool_calls=[{"name": c.name, "arguments": arguments_value(c.arguments)} for c in reply.tool_calls],
            finish_reason=reply.finish_reason,
            prompt_tokens=reply.usage.prompt_tokens,
            completion_tokens=reply.usage.completion_tokens,
            cached_tokens=reply.usage.cached_tokens or None,
            cache_write_tokens=reply.usage.cache_write_tokens or None,
            cost_usd=round(cost, 6),
            seconds=round(time.monotonic() - started, 3),
            reasoning=reply.reasoning or None,
            refusal=reply.refusal or None,
            content_parts=[dict(p) for p in reply.parts] or None,
        ),
    )
    if journal is not None:
        journal.answered(totals.iterations, len(messages), reply, response)
    else:
        response()
    if reply.finish_reason == "length":
        emit(Event.TRUNCATED, Truncated(totals.iterations, "the model hit its output token limit"))
    return reply


def _complete_or_cut(complete: Callable[[], Message], cut: Cut, emit: Emit) -> Message:
    """``complete()`` in a thread of its own while this one waits for its answer or the run's cut:
    a blocked HTTP read cannot be woken from another thread, so a cut request is given up (the
    thread ends with the client's own timeout, its answer unread) and the run ends at once."""
    done = threading.Event()
    answer: list[Message] = []
    failure: list[BaseException] = []

    def ask() -> None:
        try:
            answer.append(complete())
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread, which raises it
            failure.append(exc)
        finally:
            done.set()

    threading.Thread(target=contextvars.copy_context().run, args=(ask,), name="runner-model", daemon=True).start()
    if not wait_or_cut(done.wait, None, cut):
        emit(Event.REQUEST_CUT, Detail("the model request was given up: the run was cut"))
        raise Interrupted("interrupted", "the run's model request was cut (cancelled, or declared lost)")
    if failure:
        raise failure[0]
    return answer[0]


def _charge(totals: Totals, reply: Message, pricing: Pricing) -> float:
    cost = pricing.cost(reply.usage)
    _count(totals, reply.usage, cost)
    return cost


def _count(totals: Totals, usage: Tokens, cost: float) -> None:
    totals.prompt += usage.prompt_tokens
    totals.completion += usage.completion_tokens
    totals.cached += usage.cached_tokens
    totals.cost += cost
    totals.last_progress = time.monotonic()


def _charge_summaries(replies: Sequence[Spent], totals: Totals, emit: Emit) -> None:
    """Summary calls made by the pruner (by the auxiliary model, or the run's own) count in the
    run's tokens, cost and budgets, at the prices of the provider that answered them."""
    for reply in replies:
        _count(totals, reply.usage, reply.cost_usd)
        emit(
            Event.SUMMARY,
            SideCall(
                reply.model,
                reply.provider,
                reply.usage.prompt_tokens,
                reply.usage.completion_tokens,
                round(reply.cost_usd, 6),
                chars=len(reply.text),
            ),
        )


def _describe(span: Span, llm: LLM, reply: Message) -> None:
    """A model call's span attributes: model, tokens, finish reason (never the text)."""
    span.set("gen_ai.request.model", str(getattr(llm, "model", "") or ""))
    span.set("gen_ai.usage.input_tokens", reply.usage.prompt_tokens)
    span.set("gen_ai.usage.output_tokens", reply.usage.completion_tokens)
    span.set("runner.tool_calls", len(reply.tool_calls))
    if reply.finish_reason:
        span.set("gen_ai.response.finish_reason", reply.finish_reason)


def _traced_invoke(
    call: ToolCall,
    by_name: dict[str, ToolEntry],
    ctx: ToolContext,
    redact: Callable[[str], str] | None,
    tracer: Tracer,
) -> tuple[str, bool]:
    """``_invoke`` inside a tool-call span (name and outcome only: arguments may hold secrets)."""
    with tracer.span("tool call", {"runner.tool": call.name, "runner.tool_call_id": call.id}) as span:
        result, failed = _invoke(call, by_name, ctx, redact)
        span.set("runner.failed", failed)
        span.set("runner.result_chars", len(result))
    return result, failed


def _run_tool(
    call: ToolCall,
    by_name: dict[str, ToolEntry],
    ctx: ToolContext,
    emit: Emit,
    redact: Callable[[str], str] | None,
    tracer: Tracer = NOOP,
    cut: Cut | None = None,
    journal: Journal | None = None,
    turn: int = 0,
) -> tuple[str, bool]:
    if journal is not None:
        journal.started(turn, call, lambda: _announce(call, emit))
    else:
        _announce(call, emit)
    started = time.monotonic()
    result, failed = _traced_invoke(call, by_name, ctx, redact, tracer)
    seconds = time.monotonic() - started
    _settle(journal, turn, call, lambda: _report(call, result, failed, seconds, emit, cut), result, failed)
    return result, failed


def _settle(
    journal: Journal | None,
    turn: int,
    call: ToolCall,
    event: Callable[[], None],
    result: str | None = None,
    failed: bool = False,
) -> None:
    """Record ``event`` with the journal's entry of the call (``result`` None: it started)."""
    if journal is None:
        event()
    elif result is None:
        journal.started(turn, call, event)
    else:
        journal.finished(turn, call, result, failed, event)


def _keyed(ctx: ToolContext, journal: Journal | None, turn: int, index: int) -> ToolContext:
    """The tool context of call ``index`` of ``turn``: with its idempotency key (``RUNNER_STEP_KEY``)."""
    key = journal.step_key(turn, index + 1) if journal is not None else f"{ctx.run_id}:{turn}.{index + 1}"
    return replace(ctx, step_key=key)


def _may_change_files(call: ToolCall, by_name: dict[str, ToolEntry]) -> bool:
    """May this call change the workdir's files? Not when it cannot run (unknown tool, arguments
    that are not a JSON object); else its tool says (``ToolEntry.may_change_files``)."""
    entry = by_name.get(call.name)
    if entry is None:
        return False
    try:
        args = json.loads(call.arguments or "{}")
    except ValueError:
        return False
    return isinstance(args, dict) and entry.may_change_files(args)


def _announce(call: ToolCall, emit: Emit) -> None:
    emit(Event.TOOL_CALL, CallEvent(call.id, call.name, arguments_value(call.arguments)))


def _invoke(
    call: ToolCall, by_name: dict[str, ToolEntry], ctx: ToolContext, redact: Callable[[str], str] | None
) -> tuple[str, bool]:
    """The call's result text (redacted) and whether it failed; events are the caller's."""
    failed = True
    entry = by_name.get(call.name)
    if entry is None:
        result = f"error: unknown tool {call.name!r}; available: {', '.join(sorted(by_name)) or '(none)'}"
    else:
        try:
            args = json.loads(call.arguments or "{}")
        except ValueError as exc:
            args, result = None, f"error: arguments are not valid JSON ({exc}); send a JSON object"
        if args is not None:
            problem = check_args(entry.parameters, args)
            if problem:
                result = f"error: {problem}"
            else:
                try:
                    answer = entry.handler(args, ctx)
                    result, failed = answer.text, answer.failed
                except ToolError as exc:
                    result = f"error: {exc}"
    if redact is not None:
        result = redact(result)
    return result, failed


def _report(call: ToolCall, result: str, failed: bool, seconds: float, emit: Emit, cut: Cut | None = None) -> None:
    """The call's ``tool_result`` event; ``cut: true`` when the run was cut meanwhile (the call was ended)."""
    was_cut = (cut is not None and cut.is_set()) or None
    emit(
        Event.TOOL_RESULT,
        ToolResult(call.id, call.name, _preview(result), len(result), failed, round(seconds, 3), was_cut),
    )


def _run_parallel(
    calls: Sequence[ToolCall],
    by_name: dict[str, ToolEntry],
    ctx: ToolContext,
    emit: Emit,
    redact: Callable[[str], str] | None,
    stop: threading.Event,
    tracer: Tracer = NOOP,
    cut: Cut | None = None,
    journal: Journal | None = None,
    turn: int = 0,
) -> list[tuple[str, bool]] | None:
    """Run a turn's calls concurrently when there are several and all are read-only tools; None
    otherwise (the caller runs them one by one). The ``tool_call`` events come first and the
    ``tool_result`` events after, both in the model's order; the approval gate sees one call at
    a time (a manual approval asks one question at a time)."""
    entries = [by_name.get(c.name) for c in calls]
    if len(calls) < 2 or not all(e is not None and e.read_only for e in entries):
        return None
    for call in calls:
        _settle(journal, turn, call, partial(_announce, call, emit))
    shared = replace(ctx, approve=_one_at_a_time(ctx.approve))

    def work(call: ToolCall) -> tuple[str, bool, float]:
        if stop.is_set():
            return NOT_RUN, True, 0.0
        started = time.monotonic()
        result, failed = _traced_invoke(call, by_name, shared, redact, tracer)
        return result, failed, time.monotonic() - started

    from concurrent.futures import ThreadPoolExecutor  # only a turn of several read-only calls needs it

    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(calls)), thread_name_prefix="tool") as pool:
        # each call in a copy of this thread's context, so its span is a child of the caller's
        futures = [pool.submit(contextvars.copy_context().run, work, call) for call in calls]
        done = future_results(futures)  # a signal to the run is handled while they work
    for call, (result, failed, seconds) in zip(calls, done, strict=True):
        _settle(journal, turn, call, partial(_report, call, result, failed, seconds, emit, cut), result, failed)
    return [(result, failed) for result, failed, _ in done]


def _one_at_a_time(approve: ApproveFn) -> ApproveFn:
    lock = threading.Lock()

    def gated(command: str) -> ApprovalResult:
        with lock:
            return approve(command)

    return gated


def _track_loop(recent: list[str], call: ToolCall, failed: bool) -> list[str]:
    key = f"{call.name}\x00{_canonical(call.arguments)}"
    if not failed:
        return []
    recent = [*recent, key] if recent and recent[-1] == key else [key]
    if len(recent) >= LOOP_REPEATS:
        raise LoopDetected("loop", f"the same failing call to {call.name} was made {LOOP_REPEATS} times in a row")
    return recent


def _canonical(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), sort_keys=True)
    except ValueError:
        return arguments


def _grace(
    llm: LLM,
    messages: list[dict[str, Any]],
    limits: Limits,
    totals: Totals,
    emit: Emit,
    pricing: Pricing,
    exit_: LoopExit,
) -> str:
    """One bounded call without tools for a report of what was done and what is left: at most
    GRACE_TIMEOUT seconds (never past the hard deadline) and GRACE_MAX_TOKENS tokens. Its
    tokens count; if it fails or there is no time left, the run keeps an empty output."""
    _answer_pending(messages, exit_.detail)
    end = limits.hard_deadline if limits.hard_deadline is not None else limits.deadline
    timeout = GRACE_TIMEOUT if end is None else min(GRACE_TIMEOUT, end - time.monotonic())
    if timeout < GRACE_MIN_SECONDS:
        emit(Event.GRACE_SKIPPED, Limit(exit_.reason, "no time left before the run's hard deadline"))
        return ""
    messages.append({"role": "user", "content": GRACE_PROMPT.format(why=exit_.detail)})
    emit(Event.GRACE, Grace(exit_.reason, round(timeout, 1), GRACE_MAX_TOKENS))
    try:
        reply = _call(llm, messages, [], totals, emit, pricing, timeout=timeout, max_tokens=GRACE_MAX_TOKENS)
    except RunnerError as exc:  # recorded; the limit is already the run's outcome
        emit(Event.GRACE_FAILED, Error(str(exc)))
        return ""
    messages.append(reply.to_dict())
    return reply.answer


def _answer_pending(messages: list[dict[str, Any]], why: str) -> None:
    """Give every tool call of the last assistant turn a result (a call cut short by the limit
    gets "not run"), so the conversation stays valid for the grace request."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "assistant":
            break
    else:
        return
    answered = {m.get("tool_call_id") for m in messages[i + 1 :] if m.get("role") == "tool"}
    for call in messages[i].get("tool_calls") or []:
        if call["id"] not in answered:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": f"not run: {why}"})


def _preview(text: str) -> str:
    if len(text) <= PREVIEW_CHARS:
        return text
    half = PREVIEW_CHARS // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters not recorded ...]\n{text[-half:]}"
