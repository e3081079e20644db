"""A run's journal of completed steps, and resuming from it (issue 33).

Every model turn (the answer, as a cassette records it, and the request's message count) and every
tool call (``started`` when it is announced, ``done`` with its result) is written to the store's
``run_journal`` in the same transaction as the event that tells of it. A run resumed (a new attempt
of the same run: ``runs.parent_run`` names the first) reads the journal of its first attempt: the
loop takes the journaled answers instead of asking the model and the journaled results instead of
running the tools, then goes on live from the first step with no entry. A tool call that was
started but has no result (the worker was lost while it ran) is not run again: its result tells
the model the outcome is unknown and to check before redoing it.

Idempotency keys: ``RUN:STEP`` where RUN is the first attempt's id and STEP the turn and call
(``3.1``), ``pre_run``, ``deliver:N`` (the Nth sink) or ``alert:KIND``: the same in every attempt.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from runner.agent.loop import Recall
from runner.agent.types import Message, ToolCall, Usage
from runner.config.jobs import Resume
from runner.events import Steer
from runner.store import Store
from runner.store import journal as rows
from runner.store.ledger import RunRow

UNKNOWN = (
    "outcome unknown: the worker running this run was lost while this step ran, and the run was "
    "resumed from its last completed step. The call {what} may have run in full, in part or not at "
    "all, and it was not run again. Check its effects (files, processes, remote state) before you "
    "run it again."
)


@dataclass
class Journal:
    """One attempt's view of its run's journal: what to replay, and the writer of new steps."""

    store: Store
    root: str  # the first attempt: the journal's key and the idempotency keys' RUN
    run_id: str  # this attempt
    loaded: list[rows.Entry] = field(default_factory=list)
    replayed_turns: int = 0
    replayed_results: int = 0
    unknown: list[str] = field(default_factory=list)  # the calls whose outcome was unknown
    replayed_steers: list[str] = field(default_factory=list)  # ids of the messages replayed (given to the model)
    spent: Usage = Usage()
    spent_cost: float = 0.0
    # the run's secrets masked in every body written (a key the model echoed is not kept at rest);
    # a replayed turn shows the model ``[REDACTED]`` where it had written one
    redact: Callable[[Any], Any] = field(default=lambda body: body, repr=False)

    def __post_init__(self) -> None:
        self._turns = {e.turn: e for e in self.loaded if e.call_id == rows.TURN and e.turn > 0}
        self._calls = {(e.turn, e.call_id): e for e in self.loaded if e.call_id not in (rows.TURN, rows.STEERS)}
        self._steers = {e.turn: e for e in self.loaded if e.call_id == rows.STEERS}
        first = [e for e in self.loaded if e.turn == 0 and e.call_id == rows.TURN]
        self.first: list[dict[str, Any]] | None = first[0].body if first else None

    @property
    def resuming(self) -> bool:
        return self.first is not None

    @property
    def results(self) -> int:
        """Tool results the journal holds."""
        return sum(1 for e in self._calls.values() if e.state == rows.StepState.DONE)

    @property
    def unfinished(self) -> int:
        """Tool calls the journal saw start and never finish."""
        return sum(1 for e in self._calls.values() if e.state == rows.StepState.STARTED)

    @property
    def last_turn(self) -> int:
        """The last journaled model turn (0: none)."""
        return max(self._turns, default=0)

    def key(self, step: str) -> str:
        return f"{self.root}:{step}"

    def step_key(self, turn: int, index: int) -> str:
        """The idempotency key of call ``index`` (from 1) of model turn ``turn``."""
        return self.key(f"{turn}.{index}")

    # -- replay ---------------------------------------------------------------------------------
    def reply(self, turn: int) -> Message | None:
        """The journaled answer of model turn ``turn``, or None (ask the model)."""
        entry = self._turns.get(turn)
        if entry is None:
            return None
        self.replayed_turns += 1
        return Message.from_record(entry.body)

    def replayed(self, usage: Usage, cost: float) -> None:
        """A replayed turn's tokens and cost (counted in the run's limits, not spent again)."""
        s = self.spent
        self.spent = Usage(s.prompt_tokens + usage.prompt_tokens, s.completion_tokens + usage.completion_tokens, s.cached_tokens + usage.cached_tokens)
        self.spent_cost += cost

    def replaying(self, turn: int) -> bool:
        """Whether the journal holds the answer of model turn ``turn`` (its request is not sent)."""
        return turn in self._turns

    def steers(self, turn: int) -> list[Steer]:
        """The messages sent to the run that an earlier attempt gave the model before the request
        of turn ``turn``, in the order given (they go back into the history at the same place)."""
        entry = self._steers.get(turn)
        if entry is None:
            return []
        given = [Steer(str(s["request_id"]), str(s["by"]), str(s["text"])) for s in entry.body]
        self.replayed_steers.extend(s.request_id for s in given)
        return given

    def result(self, turn: int, call: ToolCall) -> Recall | None:
        """The journaled result of ``call`` in model turn ``turn``; an unknown outcome for one
        started but never finished; None: never started (run it)."""
        entry = self._calls.get((turn, call.id))
        if entry is None:
            return None
        if entry.state == rows.StepState.DONE:
            self.replayed_results += 1
            return Recall(str(entry.body.get("result", "")), bool(entry.body.get("failed")))
        what = f"{call.name}({_args(call.arguments)})"
        self.unknown.append(what)
        return Recall(UNKNOWN.format(what=what), True, unknown=True)

    # -- writing --------------------------------------------------------------------------------
    def begin(self, messages: list[dict[str, Any]]) -> None:
        """Journal the first messages (system and user prompt) of a run that starts fresh."""
        self._put(0, rows.TURN, rows.StepState.DONE, messages, messages=len(messages))

    def answered(self, turn: int, messages: int, reply: Message, event: Callable[[], None]) -> None:
        """The model's answer of ``turn`` (to a request of ``messages`` messages) with its event."""
        with self.store.transaction():
            event()
            self._put(turn, rows.TURN, rows.StepState.DONE, reply.to_record(), messages=messages)

    def steered(self, turn: int, steers: Sequence[Steer], event: Callable[[], None]) -> None:
        """The messages given to the model before the request of ``turn`` (those an earlier attempt
        gave, then the new ones), with the events of the new ones."""
        with self.store.transaction():
            event()
            body = [asdict(s) for s in steers]
            self._put(turn, rows.STEERS, rows.StepState.DONE, body)

    def started(self, turn: int, call: ToolCall, event: Callable[[], None]) -> None:
        with self.store.transaction():
            event()
            body = {"name": call.name, "arguments": call.arguments}
            self._put(turn, call.id, rows.StepState.STARTED, body)

    def finished(self, turn: int, call: ToolCall, result: str, failed: bool, event: Callable[[], None]) -> None:
        with self.store.transaction():
            event()
            body = {"name": call.name, "result": result, "failed": failed}
            self._put(turn, call.id, rows.StepState.DONE, body)

    def _put(self, turn: int, call_id: str, state: rows.StepState, body: Any, *, messages: int = 0) -> None:
        rows.write(self.store, self.root, self.run_id, turn, call_id, state, self.redact(body), messages=messages)


def _args(arguments: str) -> str:
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return arguments
    if isinstance(value, dict) and isinstance(value.get("command"), str):
        return repr(value["command"])
    return json.dumps(value, ensure_ascii=False)[:500]


@dataclass(frozen=True)
class Opened:
    journal: Journal
    before: RunRow | None  # the attempt it resumes (None: it starts afresh)


def open_journal(
    store: Store, row: RunRow, policy: Resume, *, forced: bool = False, redact: Callable[[Any], Any] | None = None
) -> Opened:
    """The journal of the run ``row`` is an attempt of: replayed when this attempt resumes (the
    job's ``resume: auto`` and the attempt before it was lost, or ``forced`` by ``runner runs
    resume``), else empty (the run starts over; it journals its own steps either way)."""
    masked: Callable[[Any], Any] = redact if redact is not None else (lambda body: body)
    before = rows.previous(store, row)
    resume = before is not None and (forced or (policy == Resume.AUTO and rows.lost(before)))
    if before is None or not resume:
        return Opened(Journal(store, row.id, row.id, redact=masked), None)
    key = rows.key_of(store, before.id)
    return Opened(Journal(store, key, row.id, rows.entries(store, key), redact=masked), before)
