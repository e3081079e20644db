"""Approval of dangerous commands: a policy and a callback chosen once at run start, then frozen.

``deny`` (the default) blocks dangerous commands and tells the model to find another way;
``approve`` auto-approves them; ``manual`` asks on the TTY (y/N, default no, with a timeout) and,
with nobody at a terminal (serve, kanban workers, ``run-job`` without a TTY), parks the run until a
person answers with ``runner approvals grant | deny`` or ``approval_timeout`` passes
(``runner.run.parked``); ``smart`` asks the judge model, and hands an escalated command to a person
as ``manual`` does (``runner.safety.judge``). ``allow:`` glob patterns approve a
command whose every dangerous segment matches a pattern, under every policy. Hardline commands
are blocked under every policy and by every pattern. Each decision is written to the
``approvals`` table (command redacted) and logged as a run event.

Nothing the agent does during the run (environment variables, config files) can change the
gate: it is built from the job spec before the first tool call and holds no reference to
anything mutable.
"""

from __future__ import annotations

import functools
import os
import re
import select
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from runner.safety.control import WRITES_CONTROL
from runner.safety.latitude import Approvals
from runner.safety.result import ApprovalResult, ToolCheck

if TYPE_CHECKING:
    from runner.safety.control import ControlPlane
    from runner.safety.judge import Ruling
    from runner.safety.shell import Verdict

BLOCKED_TEMPLATE = "blocked: {reasons}; this command is not allowed in this run. Find another way to do the task."
HARDLINE_TEMPLATE = "blocked: {reasons}; this command never runs under runner. Do not retry it."
TOOL_BLOCKED = "blocked: {tool} {reasons}; it is not allowed in this run. Find another way to do the task."
TOOL_HARDLINE = "blocked: an argument of {tool} holds a command that never runs under runner ({reasons}). Do not retry it."


@dataclass(frozen=True)
class Answer:
    """A callback's decision with who made it (``by``: ``policy``, ``human``, ``user@host``,
    ``timeout``, ``judge``...), for a denial why (told to the model), and under ``approvals: smart``
    the judge's ruling (for the audit)."""

    approved: bool
    by: str
    why: str = ""
    ruling: Ruling | None = None


class Callback(Protocol):
    """Decides a dangerous (not hardline) command: True approves; an ``Answer`` also names who decided."""

    @property
    def name(self) -> str: ...

    def __call__(self, command: str, verdict: Verdict) -> bool | Answer: ...


def answer_of(callback: Callback, command: str, verdict: Verdict) -> Answer:
    """Ask ``callback``; a bare True/False becomes an ``Answer`` by ``human`` (the TTY) or ``policy``."""
    result = callback(command, verdict)
    if isinstance(result, Answer):
        return result
    return Answer(result, "human" if callback.name == "tty" else "policy")


def _blocked(template: str, answer: Answer, **fields: str) -> str:
    text = template.format(**fields)
    return f"blocked ({answer.why}): {text.removeprefix('blocked: ')}" if answer.why else text


@dataclass(frozen=True)
class AutoApprove:
    name: str = "auto-approve"

    def __call__(self, command: str, verdict: Verdict) -> bool:
        return True


@dataclass(frozen=True)
class AutoDeny:
    name: str = "auto-deny"

    def __call__(self, command: str, verdict: Verdict) -> bool:
        return False


@dataclass(frozen=True)
class TtyPrompt:
    """Asks on the controlling terminal; no answer within ``timeout`` seconds means no."""

    timeout: float = 60.0
    name: str = "tty"

    def __call__(self, command: str, verdict: Verdict) -> bool:
        try:
            fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
        except OSError:
            return False
        try:
            question = (
                f"\nrunner: the agent wants to run a dangerous command ({'; '.join(verdict.reasons)}):\n"
                f"    {command}\nallow it? [y/N] ({self.timeout:.0f}s) "
            )
            os.write(fd, question.encode("utf-8", "replace"))
            answer = b""
            deadline = time.monotonic() + self.timeout
            while not answer.endswith(b"\n"):
                left = deadline - time.monotonic()
                ready, _, _ = select.select([fd], [], [], max(0.0, left))
                if not ready:
                    os.write(fd, b"\nno answer: denied\n")
                    return False
                chunk = os.read(fd, 256)
                if not chunk:
                    return False
                answer += chunk
            return answer.decode("utf-8", "replace").strip().lower() in ("y", "yes")
        finally:
            os.close(fd)


def has_tty() -> bool:
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return False
    try:
        os.close(os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY))
    except OSError:
        return False
    return True


def callback_for(policy: str, *, interactive: bool, tty_timeout: float = 60.0) -> Callback:
    """The callback a run gets without parking or a judge: a person only at a terminal
    (``manual``), else auto-deny (``smart`` too: its judge comes from ``build_gate``)."""
    if policy == Approvals.APPROVE:
        return AutoApprove()
    if policy == Approvals.MANUAL and interactive:
        return TtyPrompt(tty_timeout)
    return AutoDeny()


@dataclass(frozen=True)
class Decision:
    allowed: bool
    level: str
    reasons: tuple[str, ...]
    decided_by: str  # policy | allow | human | hardline | safe | judge | user@host | timeout ...
    message: str = ""
    ruling: Ruling | None = None  # approvals: smart: what the judge said (also when a person decided after)


def allow_match(verdict: Verdict, patterns: Sequence[str]) -> bool:
    """Every pipeline that produced a finding must match a pattern (so `git status; rm -rf x`
    is not approved by `allow: ["git status"]`).

    Matching is argument by argument: the pattern and the pipeline are split into commands
    and words the way the classifier splits them, both must have the same commands with
    the same number of words, and each word must match its pattern word, where ``*``,
    ``?`` and ``[...]`` match within that one word only. So ``rm -rf ./build*`` approves
    ``rm -rf ./build-x`` but never ``rm -rf ./build ~/.ssh``. A word holding a command
    substitution matches only the identical pattern word, and a pipeline with a
    here-document (whose body the pattern cannot see) is never approved by a pattern.
    """
    flagged = [s.strip() for s in verdict.flagged if s.strip()]
    if not patterns or not flagged:
        return False
    shapes = [shape for shape in (_shape(p) for p in patterns) if shape is not None]
    for text in flagged:
        target = _shape(text)
        if target is None or not any(_same_shape(target, shape) for shape in shapes):
            return False
    return True


_Shape = tuple[tuple[tuple[tuple[str, bool], ...], ...], ...]  # pipelines > commands > (word, literal)


def _shape(text: str) -> _Shape | None:
    """Pipelines of commands of words, as the classifier's tokenizer reads ``text``;
    None when it cannot be read or holds a here-document."""
    from runner.safety.shell.split import parse
    from runner.safety.shell.syntax import ParseBudget, ParseError

    try:
        script = parse(text, ParseBudget(2 * len(text) + 1024))
    except ParseError:
        return None
    pipelines = []
    for pipeline in script.pipelines:
        commands = []
        for cmd in pipeline.commands:
            words = [(w.value, bool(w.subs)) for w in cmd.words]
            for r in cmd.redirects:
                if r.op in ("<<", "<<-"):
                    return None
                words.append((f"{r.fd}{r.op}", True))
                words.append((r.target.value, bool(r.target.subs)))
            commands.append(tuple(words))
        pipelines.append(tuple(commands))
    return tuple(pipelines)


def _same_shape(target: _Shape, pattern: _Shape) -> bool:
    if len(target) != len(pattern):
        return False
    for t_pipe, p_pipe in zip(target, pattern, strict=True):
        if len(t_pipe) != len(p_pipe):
            return False
        for t_cmd, p_cmd in zip(t_pipe, p_pipe, strict=True):
            if len(t_cmd) != len(p_cmd):
                return False
            for (word, literal), (pat, _) in zip(t_cmd, p_cmd, strict=True):
                if not (word == pat if literal else _word_matches(word, pat)):
                    return False
    return True


def _word_matches(word: str, pattern: str) -> bool:
    """Glob match of one word where ``*`` and ``?`` stop at ``/``, and a ``..`` path
    component matches only a pattern that spells it (``./build*`` is not ``./build/..``)."""
    if word == pattern:
        return True
    if ".." in word.split("/") and ".." not in pattern.split("/"):
        return False
    return _glob_regex(pattern).fullmatch(word) is not None


@functools.lru_cache(maxsize=256)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and "]" in pattern[i + 2 :]:
            end = pattern.index("]", i + 2)
            body = pattern[i + 1 : end]
            body = "^" + body[1:] if body.startswith("!") else body
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out), re.S)


def with_control(verdict: Verdict, control: ControlPlane | None) -> Verdict:
    """``verdict`` made at least dangerous when the command writes one of the runner's control
    files (a static check on the segments the classifier examined)."""
    if control is None or verdict.level == "hardline":
        return verdict
    hits = control.command_writes(verdict)
    if not hits:
        return verdict
    return replace(verdict, level="dangerous", reasons=(*verdict.reasons, WRITES_CONTROL), flagged=hits)


def decide(
    command: str, *, policy: str, allow: Sequence[str], callback: Callback | None, control: ControlPlane | None = None
) -> Decision:
    """Pure decision for ``command`` (no I/O beyond what the callback does). ``allow:`` patterns
    never approve a write of the control files: only the policy (or a person) can."""
    from runner.safety.shell import classify  # the classifier loads when the first command is decided

    verdict = with_control(classify(command), control)
    reasons = tuple(verdict.reasons)
    if verdict.level == "hardline":
        return Decision(False, "hardline", reasons, "hardline", HARDLINE_TEMPLATE.format(reasons="; ".join(reasons)))
    if verdict.level == "safe":
        return Decision(True, "safe", reasons, "safe")
    if WRITES_CONTROL not in reasons and allow_match(verdict, allow):
        return Decision(True, "dangerous", reasons, "allow")
    if callback is None:  # fail closed
        return Decision(False, "dangerous", reasons, "policy", BLOCKED_TEMPLATE.format(reasons="; ".join(reasons)))
    answer = answer_of(callback, command, verdict)
    if answer.approved:
        return Decision(True, "dangerous", reasons, answer.by, ruling=answer.ruling)
    message = _blocked(BLOCKED_TEMPLATE, answer, reasons="; ".join(reasons))
    return Decision(False, "dangerous", reasons, answer.by, message, answer.ruling)


def decide_tool(check: ToolCheck, *, callback: Callback | None) -> Decision:
    """A tool call: refused when any string argument is a hardline command; safe tools pass;
    dangerous ones go to the callback (``approve``: yes, ``deny`` and unattended: no)."""
    from runner.safety.shell import Verdict, classify  # loaded at the first decided call

    for payload in check.payloads:
        verdict = classify(payload)
        if verdict.level == "hardline":
            reasons = tuple(verdict.reasons)
            message = TOOL_HARDLINE.format(tool=check.tool, reasons="; ".join(reasons))
            return Decision(False, "hardline", reasons, "hardline", message)
    if check.level == "safe":
        return Decision(True, "safe", (), "safe")
    reasons = (check.reason,)
    if callback is None:
        message = TOOL_BLOCKED.format(tool=check.tool, reasons=check.reason)
        return Decision(False, "dangerous", reasons, "policy", message)
    answer = answer_of(callback, check.summary or check.tool, Verdict("dangerous", reasons, (), ()))
    if answer.approved:
        return Decision(True, "dangerous", reasons, answer.by, ruling=answer.ruling)
    message = _blocked(TOOL_BLOCKED, answer, tool=check.tool, reasons=check.reason)
    return Decision(False, "dangerous", reasons, answer.by, message, answer.ruling)


@dataclass(frozen=True)
class Gate:
    """The run's frozen approval gate; ``ToolContext.approve`` calls it for every command."""

    policy: str
    allow: tuple[str, ...]
    callback: Callback | None
    record: Callable[[str, Decision], None]
    control: ControlPlane | None = None

    def __call__(self, command: str) -> ApprovalResult:
        decision = self.check(command)
        return ApprovalResult(decision.allowed, decision.message)

    def tool(self, check: ToolCheck) -> ApprovalResult:
        """``ToolContext.approve_tool``: decide a non-shell tool call and audit it unless safe."""
        decision = decide_tool(check, callback=self.callback)
        if decision.level != "safe":
            self.record(check.summary or check.tool, decision)
        return ApprovalResult(decision.allowed, decision.message)

    def check(self, command: str) -> Decision:
        """Decide ``command`` and audit the decision unless it is safe."""
        decision = decide(command, policy=self.policy, allow=self.allow, callback=self.callback, control=self.control)
        if decision.level != "safe":
            self.record(command, decision)
        return decision


Record = Callable[[str, Decision], None]  # the audit of one decision (``runner.store.approvals.audit_recorder``)


def build_gate(
    job: Any,
    *,
    record: Record,
    interactive: bool,
    control: ControlPlane | None = None,
    parking: Callback | None = None,
    judge: Callable[[Callback], Callback] | None = None,
) -> Gate:
    """The run's gate. ``parking``: a person's answer with nobody at a terminal
    (``runner.run.parked.Parking``); without one such a run denies. ``judge``: under ``approvals:
    smart``, the judge (``runner.safety.judge.Judge``) given who decides what it escalates (the
    TTY prompt, or ``parking``); without one smart denies."""
    policy = Approvals(job.spec.approvals)
    person = parking if parking is not None and not interactive else callback_for(Approvals.MANUAL, interactive=interactive)
    callback = callback_for(policy, interactive=interactive)
    if policy == Approvals.MANUAL:
        callback = person
    elif policy == Approvals.SMART and judge is not None:
        callback = judge(person)
    return Gate(policy, tuple(job.spec.allow), callback, record, control)


class Outcome(StrEnum):
    """What happens to a command under a policy (``runner approvals check``)."""

    RUNS = "runs"
    DENIED = "denied"
    REFUSED = "refused"  # hardline: under every policy
    WAITS = "waits"  # manual: a person answers (a TTY prompt, or the run parks)
    JUDGED = "judged"  # smart: the judge model answers; escalate waits as manual does


def outcome(decision: Decision, policy: str) -> Outcome:
    """What a command ``decide`` classified with an auto-deny callback (so nobody was asked) meets
    under ``policy``: hardline is refused, safe and ``allow:``-matched commands run, the rest is the
    policy's."""
    if decision.level == "hardline":
        return Outcome.REFUSED
    if decision.allowed:
        return Outcome.RUNS
    return {
        Approvals.APPROVE: Outcome.RUNS,
        Approvals.MANUAL: Outcome.WAITS,
        Approvals.SMART: Outcome.JUDGED,
    }.get(Approvals(policy), Outcome.DENIED)
