"""A run's events as a trace: the steps of its timeline (the run page's waterfall), each placed by
its start and sized by its duration from the run's start.

One step per event of ``runner.events.STEP_KINDS`` (``queries.step_count`` counts the same rows in
the store): a model turn from its ``request`` to its ``response`` (its tokens and cost), a tool
call to its ``tool_result``, an approval the run parked on to its answer, a message given to the
model (an instant), the ``pre_run`` script and the delivery (recorded when they ended: each starts
at the event before it). A step with no end yet is open: it runs to now while the run is live, to
the run's end after.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from runner.events import (
    ApprovalAnswered,
    ApprovalParked,
    Delivered,
    Event,
    PreRun,
    Recorded,
    Request,
    Response,
    Steer,
    ToolCall,
    ToolResult,
    json_text,
)
from runner.statuses import ApprovalState

KINDS = {  # a step's kind as its row names it
    "model": "model",
    "tool": "tool",
    "approval": "wait",
    "steer": "message",
    "pre_run": "pre_run",
    "delivery": "delivery",
}
PREVIEW_CHARS = 160  # of a collapsed payload's first line
FULL_CHARS = 20_000  # of a payload shown whole


@dataclass(frozen=True)
class Part:
    """A payload of a step, collapsed to ``preview`` until opened: ``text`` pretty-printed."""

    label: str
    preview: str
    text: str
    cut: bool = False


@dataclass(frozen=True)
class Diff:
    """What the workdir's files became after the checkpoint taken just before this step."""

    checkpoint: str
    text: str
    cut: bool


@dataclass(frozen=True)
class Step:
    seq: int  # the event that opened it (the row's id: step-SEQ)
    kind: str  # model | tool | approval | steer | pre_run | delivery
    title: str
    ts: str
    start: float  # seconds after the run's start
    seconds: float | None  # None: open (still going while the run is live)
    failed: bool = False
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None
    parts: tuple[Part, ...] = ()
    diff: Diff | None = None
    note: str = ""  # e.g. "no reply recorded"

    @property
    def state(self) -> str:
        """What the live stream compares: a row is sent again when it changes (its end came)."""
        return "open" if self.seconds is None else "done"


@dataclass(frozen=True)
class Timeline:
    steps: tuple[Step, ...]
    span: float  # seconds from the run's start to its end (or now, while it is live)
    live: bool
    steps_by_kind: dict[str, int] = field(default_factory=dict)

    def width(self, step: Step) -> float:
        """The bar's width in the track's units (seconds): an instant still shows as a sliver."""
        seconds = self.span - step.start if step.seconds is None else step.seconds
        return max(seconds, self.span * 0.004, 0.001)


def when(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def _json(text: str) -> Any:
    """The JSON object or list ``text`` holds, or None."""
    text = text.strip()
    if text[:1] not in ("{", "[") or text[-1:] not in ("}", "]"):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict | list) else None


def pretty(value: Any) -> str:
    """A payload as shown opened: JSON indented, and so is text that holds a JSON object or list,
    whole or after a first line (a command's ``exit code 0``)."""
    if not isinstance(value, str):
        return json.dumps(value, indent=2, ensure_ascii=False)
    whole = _json(value)
    if whole is not None:
        return json.dumps(whole, indent=2, ensure_ascii=False)
    head, _, rest = value.partition("\n")
    after = _json(rest) if rest else None
    if after is not None:
        return f"{head}\n{json.dumps(after, indent=2, ensure_ascii=False)}"
    return value


def part(label: str, value: Any) -> Part:
    """``value`` collapsed: its first ``PREVIEW_CHARS`` on one line (line breaks as ↵); whole,
    pretty-printed, up to ``FULL_CHARS``."""
    lines = [line.strip() for line in json_text(value).splitlines() if line.strip()]
    flat = " ↵ ".join(lines)
    preview = flat if len(flat) <= PREVIEW_CHARS else flat[:PREVIEW_CHARS] + " …"
    text = pretty(value)
    return Part(label, preview, text[:FULL_CHARS], len(text) > FULL_CHARS)


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "running"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes} min {rest} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


class _Builder:
    def __init__(self, origin: datetime | None) -> None:
        self.origin = origin
        self.steps: list[Step] = []
        self.ends: dict[int, datetime] = {}
        self.open_model: dict[int, int] = {}  # iteration -> index in steps
        self.open_tool: dict[str, int] = {}  # call id -> index
        self.open_approval: dict[str, int] = {}  # approval id -> index

    def at(self, ts: datetime) -> float:
        if self.origin is None:
            self.origin = ts
        return max((ts - self.origin).total_seconds(), 0.0)

    def add(self, step: Step) -> int:
        self.steps.append(step)
        return len(self.steps) - 1

    def close(self, index: int | None, ts: datetime, **changes: Any) -> None:
        if index is None:
            return
        step = self.steps[index]
        self.steps[index] = replace(step, seconds=max(self.at(ts) - step.start, 0.0), **changes)


def timeline(
    events: list[Recorded],
    *,
    started_at: str | None,
    ended_at: str | None,
    now: datetime,
    live: bool,
    diffs: dict[int, Diff] | None = None,
) -> Timeline:
    """The steps of ``events`` (a run's, oldest first). ``diffs``: the diff a checkpoint shows,
    keyed by the seq of its ``checkpoint`` event; each goes to the first step after it."""
    b = _Builder(when(started_at) or (when(events[0].ts) if events else None))
    pending_diff: Diff | None = None
    previous: datetime | None = None
    for e in events:
        ts = when(e.ts)
        assert ts is not None
        p = e.payload
        before = previous or ts
        previous = ts
        if e.kind == Event.CHECKPOINT and diffs and e.seq in diffs:
            pending_diff = diffs[e.seq]
            continue
        index: int | None = None
        if e.kind == Event.REQUEST and isinstance(p, Request):
            title = f"model turn {p.iteration}"
            index = b.open_model[p.iteration] = b.add(Step(e.seq, "model", title, e.ts, b.at(ts), None))
        elif e.kind == Event.RESPONSE and isinstance(p, Response):
            calls = ", ".join(str(c.get("name")) for c in p.tool_calls)
            said = [
                part(label, value)
                for label, value in (
                    ("thinks", p.reasoning),
                    ("calls", [{"name": c.get("name"), "arguments": c.get("arguments")} for c in p.tool_calls]),
                    ("says", p.content),
                    ("refuses", p.refusal),
                )
                if value
            ]
            tail = f": calls {calls}" if calls else (": answers" if p.content else "")
            b.close(
                b.open_model.pop(p.iteration, None),
                ts,
                title=f"model turn {p.iteration}{tail}",
                prompt_tokens=p.prompt_tokens,
                completion_tokens=p.completion_tokens,
                cached_tokens=p.cached_tokens,
                cost_usd=p.cost_usd,
                parts=tuple(said),
            )
        elif e.kind == Event.TOOL_CALL and isinstance(p, ToolCall):
            step = Step(e.seq, "tool", f"-> {p.name}", e.ts, b.at(ts), None, parts=(part("arguments", p.arguments),))
            index = b.open_tool[p.id] = b.add(step)
        elif e.kind == Event.TOOL_RESULT and isinstance(p, ToolResult):
            i = b.open_tool.pop(p.id, None)
            if i is not None:
                blocked = str(p.result).startswith(("blocked:", "blocked ("))
                status = " (blocked)" if blocked else " (failed)" if p.failed else ""
                result = part("result", p.result)
                if p.cut:
                    result = replace(result, preview=f"(cut) {result.preview}")
                step = b.steps[i]
                b.close(i, ts, failed=p.failed or blocked, parts=(*step.parts, result), title=f"{step.title}{status}")
        elif e.kind == Event.APPROVAL_PARKED and isinstance(p, ApprovalParked):
            step = Step(
                e.seq,
                "approval",
                f"waiting for approval {p.approval_id}",
                e.ts,
                b.at(ts),
                None,
                parts=(part("command", p.command), part("reasons", p.reasons)),
            )
            index = b.open_approval[p.approval_id] = b.add(step)
        elif e.kind == Event.APPROVAL_ANSWERED and isinstance(p, ApprovalAnswered):
            i = b.open_approval.pop(p.approval_id, None)
            if i is not None:
                by = f" by {p.by}" if p.by else ""
                title = f"approval {p.approval_id}: {p.status}{by}"
                b.close(i, ts, title=title, failed=p.status != ApprovalState.GRANTED)
        elif e.kind == Event.STEERED and isinstance(p, Steer):
            title = f"message from {p.by}, given to the model:"
            index = b.add(Step(e.seq, "steer", title, e.ts, b.at(ts), 0.0, parts=(part("message", p.text),)))
        elif e.kind == Event.PRE_RUN and isinstance(p, PreRun):
            code = "timed out" if p.timed_out else f"exit {p.exit_code}"
            output = tuple(part(label, v) for label, v in (("stdout", p.stdout), ("stderr", p.stderr)) if v)
            start = b.at(before)
            step = Step(e.seq, "pre_run", f"pre_run script: {code}", e.ts, start, b.at(ts) - start, parts=output)
            index = b.add(replace(step, failed=p.timed_out or bool(p.exit_code)))
        elif e.kind == Event.DELIVERED and isinstance(p, Delivered):
            start = b.at(before)
            sinks = p.sinks or []
            failed = any(isinstance(s, dict) and s.get("ok") is False for s in sinks)
            title = f"delivery: skipped ({p.skipped})" if p.skipped else f"delivery to {len(sinks)} sink(s)"
            sent = (part("sinks", sinks),) if sinks else ()
            index = b.add(Step(e.seq, "delivery", title, e.ts, start, b.at(ts) - start, failed=failed, parts=sent))
        if index is not None and pending_diff is not None:
            b.steps[index] = replace(b.steps[index], diff=pending_diff)
            pending_diff = None
    end = when(ended_at)
    span = b.at(now if live or end is None else end) if b.origin is not None else 0.0
    steps = []
    for s in b.steps:
        if s.seconds is None and not live:  # an end never recorded: up to the run's end
            s = replace(s, seconds=max(span - s.start, 0.0), note="no end recorded")
        steps.append(s)
    span = max([span, *(s.start + (s.seconds or 0.0) for s in steps)])
    counts: dict[str, int] = {}
    for s in steps:
        counts[s.kind] = counts.get(s.kind, 0) + 1
    return Timeline(tuple(steps), span, live, counts)
