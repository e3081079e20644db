"""The events a run records (``run_events``): their kinds, one payload type per shape, the JSON
each is stored as, and how each reads as text (``runs show``, ``run-job``'s progress, the
dashboard's timeline). Nothing else names an event kind by its string.

A payload is stored as a JSON object of its fields; a field with a default is left out while it
holds ``None`` (the stored form of the string-keyed payloads this replaced). ``from_``/``for_``
are stored as ``from``/``for``. A kind this version does not know, or a stored payload that no
longer fits its type (an older ledger), reads back as ``Unknown``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any


class Event(StrEnum):
    ALERT = "alert"
    APPROVAL = "approval"
    APPROVAL_ANSWERED = "approval_answered"
    APPROVAL_JUDGED = "approval_judged"
    APPROVAL_PARKED = "approval_parked"
    BLOCKED = "blocked"
    BUDGET_REFUSED = "budget_refused"
    BUDGET_RESERVED = "budget_reserved"
    CANCELLED = "cancelled"
    CHECKPOINT = "checkpoint"
    CHECKPOINT_FAILED = "checkpoint_failed"
    CONTEXT_BLOCKED = "context_blocked"
    CONTEXT_FILE = "context_file"
    CREDENTIAL_COOLDOWN = "credential_cooldown"
    CREDENTIAL_DEAD = "credential_dead"
    CREDENTIAL_RETRY = "credential_retry"
    CREDENTIAL_ROTATED = "credential_rotated"
    CREDENTIAL_SELECTED = "credential_selected"
    CREDENTIALS_WAIT = "credentials_wait"
    DELIVERED = "delivered"
    ERROR = "error"
    FENCED = "fenced"
    FOLLOW_UP = "follow_up"
    GRACE = "grace"
    GRACE_FAILED = "grace_failed"
    GRACE_SKIPPED = "grace_skipped"
    INVALID_HISTORY = "invalid_history"
    LIMIT = "limit"
    MCP_SERVER = "mcp_server"
    MEMORY_HELD = "memory_held"
    MEMORY_REFUSED = "memory_refused"
    MEMORY_WRITE = "memory_write"
    MODEL_NOTE = "model_note"
    MODEL_RETRY = "model_retry"
    PRE_RUN = "pre_run"
    PROMPT = "prompt"
    PROVIDER_FALLBACK = "provider_fallback"
    PROVIDER_PROTOCOL = "provider_protocol"
    PRUNE = "prune"
    REQUEST = "request"
    REQUEST_CUT = "request_cut"
    RESUMED = "resumed"
    RESPONSE = "response"
    ROLLBACK = "rollback"
    RUN_FINISHED = "run_finished"
    RUN_STARTED = "run_started"
    SANDBOX = "sandbox"
    SKILL_BLOCKED = "skill_blocked"
    SKILL_CHANGED = "skill_changed"
    SKILL_REVIEW = "skill_review"
    SKILL_REVIEW_FAILED = "skill_review_failed"
    SKILL_REVIEW_SKIPPED = "skill_review_skipped"
    SKILL_USAGE_FAILED = "skill_usage_failed"
    SKILLS_PRELOADED = "skills_preloaded"
    STEER_UNDELIVERED = "steer_undelivered"
    STEERED = "steered"
    STREAM_CUT = "stream_cut"
    STREAM_TEXT = "stream_text"
    SUBAGENT_FINISHED = "subagent_finished"
    SUBAGENT_STARTED = "subagent_started"
    SUMMARY = "summary"
    SUMMARY_FAILED = "summary_failed"
    TAMPERED = "tampered"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    TRUNCATED = "truncated"
    USAGE_ESTIMATED = "usage_estimated"


# -- payloads: one type per shape, only the fields some site records -------------------------------
@dataclass(frozen=True)
class Alert:
    event: str  # runner/delivery/alerts.py's Event
    sent: bool
    sinks: list[dict[str, Any]] | None = None
    repeat: bool | None = None
    streak: int | None = None
    throttled: bool | None = None


@dataclass(frozen=True)
class Approval:
    command: str
    level: str
    reasons: list[str]
    decision: str  # approved | denied
    decided_by: str | None = None
    judge: str | None = None  # approvals: smart: the judge model asked
    verdict: str | None = None  # its verdict: approve | deny | escalate
    why: str | None = None  # its reason, or why it gave none (then denied)


@dataclass(frozen=True)
class ApprovalParked:
    approval_id: str
    command: str
    reasons: list[str]
    expires_at: str


@dataclass(frozen=True)
class ApprovalAnswered:
    approval_id: str
    status: str
    by: str | None
    reason: str | None


@dataclass(frozen=True)
class Blocked:
    what: str
    protected: str
    reason: str


@dataclass(frozen=True)
class Budget:
    reserved_usd: float
    providers: list[str]
    caps: list[str]
    cap: str | None = None  # budget_refused: the cap that refused, and why
    detail: str | None = None


@dataclass(frozen=True)
class By:
    by: str


@dataclass(frozen=True)
class Checkpoint:
    """A snapshot of the workdir in its shadow git repository (runner/run/checkpoints.py)."""

    id: str  # the shadow repository's commit
    workdir: str  # the host folder
    files: int
    seconds: float
    step: int | None = None  # the model turn that followed (None: the end of the run, or a rollback's undo point)
    tool: str | None = None  # that turn's first call that may change files
    label: str | None = None  # end | rollback
    changed: int | None = None  # files that differ from the run's previous checkpoint (None: the first)
    mb: float | None = None  # the snapshotted files' size
    ignored: list[str] | None = None  # kept out by .gitignore (the run's first checkpoint; folders as one)
    oversize: list[str] | None = None  # over checkpoint_max_file_mb, left out
    skipped: list[str] | None = None  # unreadable, not a file, a repository of its own
    more: int | None = None  # paths left out that the lists above do not name
    max_mb: int | None = None  # the job's caps (the run's first checkpoint): a rollback's own checkpoint uses them
    max_file_mb: int | None = None


@dataclass(frozen=True)
class CheckpointFailed:
    error: str
    step: int | None = None
    gave_up: bool | None = None  # no more checkpoints in this run


@dataclass(frozen=True)
class Resumed:
    """An attempt that resumed its run from the journal of completed steps (runner/run/journal.py)."""

    from_run: str  # the attempt before it
    attempt: int
    turn: int  # the last model turn the journal holds: the model is asked again from the next one
    results: int  # tool results journaled (not run again)
    unfinished: int = 0  # calls started but never finished (the model is told their outcome is unknown)
    journal: str | None = None  # the attempt whose journal it is (the run's first, or the last that started over)


@dataclass(frozen=True)
class Rollback:
    to: str  # the checkpoint restored
    undo: str  # the checkpoint of the files as they were before (rolling back to it undoes this)
    written: int
    deleted: int
    step: int | None = None
    by: str | None = None
    untouched: list[str] | None = None  # paths the target holds that are now files no checkpoint holds


@dataclass(frozen=True)
class Findings:
    """Text the injection scan kept out of the prompt (a context file, a skill)."""

    file: str
    findings: list[str]
    name: str | None = None


@dataclass(frozen=True)
class ContextFile:
    file: str
    chars: int


@dataclass(frozen=True)
class Credential:
    provider: str
    label: str
    fingerprint: str
    strategy: str | None = None
    from_: str | None = None
    reason: str | None = None
    http_status: int | None = None
    kind: str | None = None
    error: str | None = None
    wait_s: float | None = None
    seconds: float | None = None
    until: str | None = None


@dataclass(frozen=True)
class CredentialsWait:
    provider: str
    wait_s: float
    for_: str
    keys: str  # each key's state


@dataclass(frozen=True)
class Delivered:
    sinks: list[str] | None = None
    skipped: str | None = None


@dataclass(frozen=True)
class Failure:
    reason: str | None
    error: str


@dataclass(frozen=True)
class Fenced:
    status: str
    reason: str | None
    error: str | None


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Detail:
    detail: str


@dataclass(frozen=True)
class Grace:
    reason: str
    timeout_s: float
    max_tokens: int


@dataclass(frozen=True)
class Error:
    error: str


@dataclass(frozen=True)
class Limit:
    reason: str
    detail: str


@dataclass(frozen=True)
class InvalidHistory:
    error: str
    messages: int


@dataclass(frozen=True)
class McpServer:
    server: str
    status: str  # started | failed | bridge_unavailable | restarting | crashed | stopped
    where: str | None = None
    tools: int | None = None
    seconds: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class MemoryNote:
    scope: str
    action: str
    content: str | None = None
    old_text: str | None = None
    usage: str | None = None
    reason: str | None = None
    id: str | None = None
    findings: list[str] | None = None


@dataclass(frozen=True)
class ModelNote:
    stop_reason: str
    detail: str


@dataclass(frozen=True)
class ModelRetry:
    attempt: int
    error: str
    wait_s: float


@dataclass(frozen=True)
class PreRun:
    exit_code: int | None
    timed_out: bool
    stdout: str
    cut: bool | None = None  # the run was cut meanwhile (cancelled, declared lost): the script was ended
    stderr: str | None = None  # the last lines of its stderr (kept apart from stdout since issue 32)


@dataclass(frozen=True)
class Prompt:
    user: str
    tools: list[str]
    model: str
    system_chars: int | None = None
    memory_chars: int | None = None
    unavailable: dict[str, str] | None = None


@dataclass(frozen=True)
class ProviderFallback:
    from_: str
    to: str
    model: str
    reason: str
    error: str


@dataclass(frozen=True)
class ProviderProtocol:
    error: str
    excerpt: str


@dataclass(frozen=True)
class Prune:
    tokens_before: int
    tokens_after: int
    budget: int
    deduped_reads: int
    summarized_turns: int
    summarized_results: int
    trimmed_messages: int
    dropped_messages: int


@dataclass(frozen=True)
class Request:
    iteration: int
    messages: int
    tools: int


@dataclass(frozen=True)
class Response:
    iteration: int
    content: str | None
    tool_calls: list[dict[str, Any]]  # name, arguments
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    seconds: float
    cached_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning: str | None = None
    refusal: str | None = None
    content_parts: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class RunFinished:
    status: str
    reason: str | None
    seconds: float | None = None


@dataclass(frozen=True)
class RunStarted:
    job: str
    trigger: str
    pid: int | None = None
    parent_run_id: str | None = None
    depth: int | None = None


@dataclass(frozen=True)
class Sandbox:
    network: bool
    writable: list[str]


@dataclass(frozen=True)
class SkillChanged:
    action: str
    name: str
    path: str


@dataclass(frozen=True)
class SideCall:
    """A priced side call: a pruning summary, a skill review, the smart-approval judge."""

    model: str | None
    provider: str | None
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    chars: int | None = None  # summary
    outcome: str | None = None  # skill_review: create | patch | none | failed; approval_judged: the verdict
    name: str | None = None
    why: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class ReviewSkipped:
    reason: str
    tool_calls: int


@dataclass(frozen=True)
class SkillUsageFailed:
    names: list[str]
    kind: str
    error: str


@dataclass(frozen=True)
class SkillsPreloaded:
    loaded: list[str]
    missing: dict[str, str]


@dataclass(frozen=True)
class Steer:
    """A message someone sent the running run (``runner runs say``, the dashboard, a kanban
    comment): ``steered`` when the model was given it, ``steer_undelivered`` when the run asked the
    model nothing more after it arrived."""

    request_id: str
    by: str
    text: str


@dataclass(frozen=True)
class StreamCut:
    error: str
    chars: int
    partial_text: str
    partial_reasoning: str | None = None


@dataclass(frozen=True)
class StreamText:
    text: str
    reasoning: str | None = None
    more: bool | None = None


@dataclass(frozen=True)
class SubagentStarted:
    run_id: str
    goal: str
    depth: int


@dataclass(frozen=True)
class SubagentFinished:
    run_id: str
    status: str
    reason: str | None
    tokens: int
    cost_usd: float


@dataclass(frozen=True)
class Tampered:
    files: list[str]


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: Any  # the arguments as JSON (older rows: the model's text)


@dataclass(frozen=True)
class ToolResult:
    id: str
    name: str
    result: str
    chars: int
    failed: bool
    seconds: float
    cut: bool | None = None  # the run was cut meanwhile: the call was ended


@dataclass(frozen=True)
class Truncated:
    iteration: int
    detail: str


@dataclass(frozen=True)
class UsageEstimated:
    prompt_tokens: int
    completion_tokens: int
    detail: str


@dataclass(frozen=True)
class Unknown:
    """A kind this version does not know, or a payload that no longer fits its type, as stored."""

    data: dict[str, Any]


Payload = (
    Alert | Approval | ApprovalParked | ApprovalAnswered | Blocked | Budget | By | Checkpoint | CheckpointFailed
    | Findings | ContextFile | Credential
    | CredentialsWait | Resumed | Delivered | Detail | Failure | Fenced | Text | Grace | Error | Limit | InvalidHistory | McpServer
    | MemoryNote | ModelNote | ModelRetry | PreRun | Prompt | ProviderFallback | ProviderProtocol | Prune | Request
    | Response | Rollback | RunFinished | RunStarted | Sandbox | SkillChanged | SideCall | ReviewSkipped | SkillUsageFailed
    | SkillsPreloaded | Steer | StreamCut | StreamText | SubagentStarted | SubagentFinished | Tampered | ToolCall | ToolResult
    | Truncated | UsageEstimated | Unknown
)  # fmt: skip
Emit = Callable[[Event, Payload], None]  # how a part of a run records an event


def no_events(kind: Event, payload: Payload) -> None:
    return None


PAYLOADS: dict[Event, type[Payload]] = {
    Event.ALERT: Alert,
    Event.APPROVAL: Approval,
    Event.APPROVAL_ANSWERED: ApprovalAnswered,
    Event.APPROVAL_JUDGED: SideCall,
    Event.APPROVAL_PARKED: ApprovalParked,
    Event.BLOCKED: Blocked,
    Event.BUDGET_REFUSED: Budget,
    Event.BUDGET_RESERVED: Budget,
    Event.CANCELLED: By,
    Event.CHECKPOINT: Checkpoint,
    Event.CHECKPOINT_FAILED: CheckpointFailed,
    Event.RESUMED: Resumed,
    Event.CONTEXT_BLOCKED: Findings,
    Event.CONTEXT_FILE: ContextFile,
    Event.CREDENTIAL_COOLDOWN: Credential,
    Event.CREDENTIAL_DEAD: Credential,
    Event.CREDENTIAL_RETRY: Credential,
    Event.CREDENTIAL_ROTATED: Credential,
    Event.CREDENTIAL_SELECTED: Credential,
    Event.CREDENTIALS_WAIT: CredentialsWait,
    Event.DELIVERED: Delivered,
    Event.ERROR: Failure,
    Event.FENCED: Fenced,
    Event.FOLLOW_UP: Text,
    Event.REQUEST_CUT: Detail,
    Event.GRACE: Grace,
    Event.GRACE_FAILED: Error,
    Event.GRACE_SKIPPED: Limit,
    Event.INVALID_HISTORY: InvalidHistory,
    Event.LIMIT: Limit,
    Event.MCP_SERVER: McpServer,
    Event.MEMORY_HELD: MemoryNote,
    Event.MEMORY_REFUSED: MemoryNote,
    Event.MEMORY_WRITE: MemoryNote,
    Event.MODEL_NOTE: ModelNote,
    Event.MODEL_RETRY: ModelRetry,
    Event.PRE_RUN: PreRun,
    Event.PROMPT: Prompt,
    Event.PROVIDER_FALLBACK: ProviderFallback,
    Event.PROVIDER_PROTOCOL: ProviderProtocol,
    Event.PRUNE: Prune,
    Event.REQUEST: Request,
    Event.RESPONSE: Response,
    Event.ROLLBACK: Rollback,
    Event.RUN_FINISHED: RunFinished,
    Event.RUN_STARTED: RunStarted,
    Event.SANDBOX: Sandbox,
    Event.SKILL_BLOCKED: Findings,
    Event.SKILL_CHANGED: SkillChanged,
    Event.SKILL_REVIEW: SideCall,
    Event.SKILL_REVIEW_FAILED: Error,
    Event.SKILL_REVIEW_SKIPPED: ReviewSkipped,
    Event.SKILL_USAGE_FAILED: SkillUsageFailed,
    Event.SKILLS_PRELOADED: SkillsPreloaded,
    Event.STEER_UNDELIVERED: Steer,
    Event.STEERED: Steer,
    Event.STREAM_CUT: StreamCut,
    Event.STREAM_TEXT: StreamText,
    Event.SUBAGENT_FINISHED: SubagentFinished,
    Event.SUBAGENT_STARTED: SubagentStarted,
    Event.SUMMARY: SideCall,
    Event.SUMMARY_FAILED: Error,
    Event.TAMPERED: Tampered,
    Event.TOOL_CALL: ToolCall,
    Event.TOOL_RESULT: ToolResult,
    Event.TRUNCATED: Truncated,
    Event.USAGE_ESTIMATED: UsageEstimated,
}


# -- stored form -----------------------------------------------------------------------------------
def encode(payload: Payload) -> dict[str, Any]:
    """The payload as the JSON object stored."""
    if isinstance(payload, Unknown):
        return dict(payload.data)
    return {
        f.name.rstrip("_"): value
        for f in fields(payload)
        if (value := getattr(payload, f.name)) is not None or f.default is not None
    }


def _stored(text: str | None) -> dict[str, Any]:
    """A stored payload's JSON object (a row that is not one, never written by the Recorder, as text)."""
    try:
        data = json.loads(text) if text else {}
    except ValueError:
        return {"text": text}
    return data if isinstance(data, dict) else {"value": data}


def decode(kind: str, data: Mapping[str, Any]) -> tuple[Event | str, Payload]:
    """A stored event read back: its kind (an ``Event`` when this version knows it) and payload."""
    try:
        event = Event(kind)
    except ValueError:
        return kind, Unknown(dict(data))
    cls = PAYLOADS[event]
    names = {f.name.rstrip("_"): f.name for f in fields(cls)}
    try:
        return event, cls(**{names[k]: v for k, v in data.items() if k in names})
    except TypeError:  # an older row without a field this version records
        return event, Unknown(dict(data))


@dataclass(frozen=True)
class Recorded:
    """One stored event: ``data`` is its payload's JSON object as stored (the JSON output of
    ``runs show`` and ``runs logs``), ``payload`` the same read as its type."""

    seq: int
    ts: str
    kind: Event | str
    payload: Payload
    data: dict[str, Any]

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Recorded:
        data = _stored(row["payload"])
        kind, payload = decode(row["kind"], data)
        return cls(row["seq"], row["ts"], kind, payload, data)

    def as_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "ts": self.ts, "kind": str(self.kind), "payload": self.data}

    def shown(self) -> Shown:
        return show(self.kind, self.payload)


# -- as text ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Shown:
    """An event as text: ``head`` (one line), ``body`` (what it carries, shown after the head and
    cut to width) and labelled ``parts`` on lines of their own (``thinks``, ``calls``, ``says``)."""

    head: str
    body: str = ""
    parts: tuple[tuple[str, str], ...] = ()
    whole: bool = False  # the body as it is, not cut (streamed text)

    def text(self, width: int = 400) -> str:
        """The event as lines of a terminal: the head, the body on the same line, each part below."""
        line = f"{self.head} {self.body if self.whole else clip(self.body, width)}".rstrip()
        return line + "".join(f"\n    {label}: {clip(text, width)}" for label, text in self.parts)


# kinds shown as they arrive (``runs logs``, the live timeline) but left out of ``runs show``'s
# steps: the ``response`` that follows has their text whole
LIVE_ONLY = frozenset({Event.STREAM_TEXT})

# the kinds that open a step of a run's timeline (the dashboard's waterfall), one row each: a model
# turn (its ``request``, until its ``response``), a tool call (until its ``tool_result``), an
# approval the run parked on (until ``approval_answered``), a message given to the model, the
# ``pre_run`` script and the delivery (each recorded when it ended)
STEP_KINDS = (Event.REQUEST, Event.TOOL_CALL, Event.APPROVAL_PARKED, Event.STEERED, Event.PRE_RUN, Event.DELIVERED)


def show(kind: Event | str, payload: Payload) -> Shown:
    return FORMATS[type(payload)](kind, payload)


def json_text(value: Any) -> str:
    """A JSON value as shown: text as it is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def clip(text: str, width: int) -> str:
    """``text`` on one line, cut to ``width`` characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 3] + "..."


def cached_share(prompt_tokens: int | None, cached_tokens: int | None) -> str:
    """A run's cost note: which share of its input tokens the provider served from its prompt
    cache (billed at ``pricing.cached_input_per_mtok``): `` (41% of input tokens cached)``, or ""."""
    if not cached_tokens or not prompt_tokens:
        return ""
    return f" ({min(100, round(100 * cached_tokens / prompt_tokens))}% of input tokens cached)"


def _plain(kind: Event | str, payload: Payload) -> Shown:
    return Shown(f"{kind}:", json.dumps(encode(payload), ensure_ascii=False))


def _response(kind: Event | str, p: Response) -> Shown:
    head = f"model turn {p.iteration}: {p.prompt_tokens}+{p.completion_tokens} tokens"
    if p.cached_tokens:
        head += f" ({p.cached_tokens} cached)"
    if p.cost_usd:
        head += f", ${p.cost_usd:.5f}"
    calls = ", ".join(f"{c.get('name')}({clip(json_text(c.get('arguments', '')), 120)})" for c in p.tool_calls)
    parts = (("thinks", p.reasoning), ("calls", calls), ("says", p.content), ("refuses", p.refusal))
    return Shown(head, parts=tuple((label, text) for label, text in parts if text))


def _stream_text(kind: Event | str, p: StreamText) -> Shown:
    thought = f"(thinking) {p.reasoning}" if p.reasoning else ""
    more = " [... the rest comes with the model turn]" if p.more else ""
    return Shown("...", f"{thought}{p.text}{more}", whole=True)


def _stream_cut(kind: Event | str, p: StreamCut) -> Shown:
    return Shown(f"stream cut after {p.chars} characters ({p.error}){':' if p.partial_text else ''}", p.partial_text)


def _tool_call(kind: Event | str, p: ToolCall) -> Shown:
    return Shown(f"-> {p.name}", json_text(p.arguments))


def _tool_result(kind: Event | str, p: ToolResult) -> Shown:
    mark = "BLOCKED " if str(p.result).startswith(("blocked:", "blocked (")) else ""
    return Shown(f"<- {mark}{p.name}{' (failed)' if p.failed else ''}:", p.result)


def _subagent_started(kind: Event | str, p: SubagentStarted) -> Shown:
    return Shown(f"-> subagent {p.run_id}:", p.goal)


def _subagent_finished(kind: Event | str, p: SubagentFinished) -> Shown:
    reason = f" ({p.reason})" if p.reason else ""
    return Shown(f"<- subagent {p.run_id}: {p.status}{reason}, {p.tokens} tokens, ${p.cost_usd or 0:.5f}")


def _side_call(kind: Event | str, p: SideCall) -> Shown:
    if kind == Event.APPROVAL_JUDGED:
        head = f"judged by {p.model}: {p.prompt_tokens}+{p.completion_tokens} tokens, ${p.cost_usd or 0:.5f}: {p.outcome}"
        return Shown(head, p.why or "")
    if kind != Event.SKILL_REVIEW:
        return _plain(kind, p)
    what = f"{p.outcome} {p.name or ''}".rstrip()
    return Shown(
        f"skill review by {p.model}: {p.prompt_tokens}+{p.completion_tokens} tokens, ${p.cost_usd or 0:.5f}: {what}"
    )


def checkpoint_when(step: int | None, tool: str | None, label: str | None) -> str:
    """When a checkpoint was taken, in words: ``before turn 3 (write_file)``, ``at the end of the run``."""
    if label == "end":
        return "at the end of the run"
    if label == "rollback":
        return "before a rollback"
    return f"before turn {step}{f' ({tool})' if tool else ''}"


def _checkpoint(kind: Event | str, p: Checkpoint) -> Shown:
    changed = "" if p.changed is None else f", {p.changed} changed"
    head = f"checkpoint {p.id[:12]} {checkpoint_when(p.step, p.tool, p.label)}: {p.files} files{changed}, {p.seconds:.3f}s"
    out = (("ignored", p.ignored), ("over the size cap", p.oversize), ("left out", p.skipped))
    parts = tuple((label, ", ".join(paths)) for label, paths in out if paths)
    if p.more:
        parts += (("and", f"{p.more} more paths left out"),)
    return Shown(head, parts=parts)


def _checkpoint_failed(kind: Event | str, p: CheckpointFailed) -> Shown:
    when = f" before turn {p.step}" if p.step is not None else ""
    last = " (no more checkpoints in this run)" if p.gave_up else ""
    return Shown(f"checkpoint FAILED{when}{last}:", p.error)


def _rollback(kind: Event | str, p: Rollback) -> Shown:
    to = f"{p.to[:12]}{f' (before turn {p.step})' if p.step is not None else ''}"
    head = f"rollback to {to}{f' by {p.by}' if p.by else ''}: {p.written} files written, {p.deleted} deleted"
    parts: tuple[tuple[str, str], ...] = (("undo", f"runner runs rollback RUN --to {p.undo[:12]}"),)
    if p.untouched:
        parts += (("left as they are", ", ".join(p.untouched)),)
    return Shown(head, parts=parts)


def _resumed(kind: Event | str, p: Resumed) -> Shown:
    head = (
        f"resumed (attempt {p.attempt}) from run {p.from_run}: {p.turn} model turns and {p.results} tool results "
        f"replayed from the journal, the model is asked again from turn {p.turn + 1}"
    )
    if p.unfinished:
        head += f"; {p.unfinished} call(s) cut by the lost worker: the model is told their outcome is unknown"
    return Shown(head)


def _steer(kind: Event | str, p: Steer) -> Shown:
    if kind == Event.STEERED:
        return Shown(f"message from {p.by}, given to the model:", p.text)
    return Shown(f"message from {p.by}, not delivered (the run asked the model nothing more):", p.text)


def _request(kind: Event | str, p: Request) -> Shown:
    return Shown(f"request {p.iteration}: {p.messages} messages, {p.tools} tools")


FORMATS: dict[type[Payload], Callable[[Event | str, Any], Shown]] = {
    **{cls: _plain for cls in set(PAYLOADS.values()) | {Unknown}},
    Response: _response,
    StreamText: _stream_text,
    StreamCut: _stream_cut,
    ToolCall: _tool_call,
    ToolResult: _tool_result,
    SubagentStarted: _subagent_started,
    SubagentFinished: _subagent_finished,
    SideCall: _side_call,
    Request: _request,
    Checkpoint: _checkpoint,
    CheckpointFailed: _checkpoint_failed,
    Rollback: _rollback,
    Resumed: _resumed,
    Steer: _steer,
}
