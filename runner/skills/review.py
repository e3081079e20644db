"""The skill review after a run: one short side call that may save what the run worked out.

With ``skills_review: true`` (the job's, else config.yaml's), a run that ``succeeded`` after at least
``skills_review.min_tool_calls`` tool calls (5 by default) gets one review request to the auxiliary
model (config.yaml's / the job's ``auxiliary:``; without one, the run's own model). The request
holds the task, a digest of the transcript (tool calls, shortened results, the final answer) and
the agent-written skills that exist. The model answers with one JSON object:

- ``{"action": "none", "why": "..."}``: nothing worth keeping;
- ``{"action": "create", "name": "...", "content": "<the whole SKILL.md>"}``: a new skill;
- ``{"action": "patch", "name": "...", "find": "...", "replace": "..."}``: fix an agent-written skill.

The decision goes through the same ``skill_manage`` path as the agent's own calls
(``SkillSession.manage``: the rules, the content scan, the sidecar, ``created_by: agent``). Runs
answered from a cassette are reviewed only when asked (``run-job --review`` or
``skills_review.replays: true``). The caller counts the reply's tokens and cost in the run; a
failed review (model error, an answer that is not the JSON asked for, a refused skill) is a
``skill_review_failed`` event and a log line, never a change of the run's status.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runner.errors import RunnerError
from runner.skills import SkillError
from runner.skills.sidecall import PricedReply, SideModel

if TYPE_CHECKING:
    from runner.skills.manage import Change
    from runner.skills.session import SkillSession

DIGEST_CHARS = 12_000  # the transcript digest in the review request
RESULT_CHARS = 400  # each tool result in the digest
ACTIONS = ("none", "create", "patch")

SYSTEM = """\
You review one finished run of an unattended agent. Decide whether its work holds a reusable \
procedure worth saving as a skill (a SKILL.md file that a later run reads before a similar task), \
or shows that an existing agent-written skill is wrong or incomplete.

Save a skill only for a non-trivial procedure that is likely to recur: the steps, the commands that \
worked, the pitfalls met. Never save secrets, one-off facts or the run's output itself.

Answer with exactly one JSON object and nothing else:
{"action": "none", "why": "<short reason>"}
{"action": "create", "name": "<lowercase-name>", "content": "<whole SKILL.md>"}
{"action": "patch", "name": "<existing skill>", "find": "<exact text>", "replace": "<new text>"}

A SKILL.md starts with a YAML frontmatter block:
---
name: <the same name>
description: <one line: when to use it>
---
followed by a Markdown body with the steps. Patch only the agent-written skills listed."""


class ReviewError(RunnerError, ValueError):
    """The review model's answer is not the decision asked for."""

    reason = "review"


@dataclass(frozen=True)
class Decision:
    action: str  # none | create | patch
    name: str = ""
    content: str = ""
    find: str = ""
    replace: str = ""
    why: str = ""


def count_tool_calls(messages: Sequence[dict[str, Any]]) -> int:
    return sum(len(m.get("tool_calls") or ()) for m in messages if m.get("role") == "assistant")


def skip_reason(
    *, wanted: bool, succeeded: bool, tool_calls: int, min_tool_calls: int, replay: bool, replays: bool
) -> str:
    """Why this run gets no review ("" when it does)."""
    if not wanted:
        return "skills_review is off"
    if not succeeded:
        return "the run did not succeed"
    if replay and not replays:
        return "a replayed run (use run-job --review to review it)"
    if tool_calls < min_tool_calls:
        return f"{tool_calls} tool call(s); a review needs at least {min_tool_calls}"
    return ""


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 20].rstrip() + " [... shortened]"


def digest(messages: Sequence[dict[str, Any]], limit: int = DIGEST_CHARS) -> str:
    """The run as the reviewer reads it: the task, each tool call and its (shortened) result, the answer.

    The system prompt is left out; when the whole is over ``limit`` the middle goes first."""
    lines: list[str] = []
    for m in messages:
        role = m.get("role")
        content = m.get("content") if isinstance(m.get("content"), str) else ""
        if role == "user":
            lines.append(f"TASK:\n{_clip(content or '', 3000)}")
        elif role == "assistant":
            if content:
                lines.append(f"AGENT: {_clip(content, 2000)}")
            for call in m.get("tool_calls") or ():
                fn = call.get("function", {})
                lines.append(f"CALL {fn.get('name')}({_clip(str(fn.get('arguments', '')), 600)})")
        elif role == "tool":
            lines.append(f"RESULT: {_clip(content or '', RESULT_CHARS)}")
    text = "\n".join(lines)
    if len(text) <= limit:
        return text
    half = limit // 2
    return text[:half] + "\n[... middle of the run left out ...]\n" + text[-half:]


def request(messages: Sequence[dict[str, Any]], existing: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """The review request: instructions, then the run's digest and the agent-written skills."""
    listing = "\n".join(f"- {name}: {desc}" for name, desc in existing) or "(none yet)"
    user = f"Agent-written skills that exist:\n{listing}\n\nThe run:\n{digest(messages)}"
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


_FENCE = re.compile(r"\A```(?:json)?\s*\n(.*)\n```\s*\Z", re.DOTALL)


def parse_decision(text: str) -> Decision:
    """The JSON decision in ``text`` (a ```json fence around it is allowed)."""
    raw = text.strip()
    fenced = _FENCE.match(raw)
    if fenced:
        raw = fenced.group(1).strip()
    try:
        data = json.loads(raw)
    except ValueError:
        raise ReviewError(f"the review answer is not a JSON object: {_clip(text, 120)!r}") from None
    if not isinstance(data, dict):
        raise ReviewError("the review answer is not a JSON object")
    action = data.get("action")
    if action not in ACTIONS:
        raise ReviewError(f"the review answer's action {action!r} is not one of {', '.join(ACTIONS)}")
    fields = {k: data.get(k) for k in ("name", "content", "find", "replace", "why")}
    if any(v is not None and not isinstance(v, str) for v in fields.values()):
        raise ReviewError("the review answer's name, content, find, replace and why must be strings")
    decision = Decision(action, **{k: v or "" for k, v in fields.items()})
    if action != "none" and not decision.name:
        raise ReviewError(f"the review answer asks to {action} a skill but names none")
    return decision


def apply(decision: Decision, session: SkillSession) -> Change | None:
    """Carry out the decision through ``skill_manage``'s path (raises ``SkillError`` when refused)."""
    if decision.action == "create":
        return session.manage("create", decision.name, content=decision.content)
    if decision.action == "patch":
        if session.usage.get(decision.name).created_by != "agent":
            raise SkillError(
                f"skill {decision.name!r} is not agent-written; a review patches only the agent's own skills"
            )
        return session.manage("patch", decision.name, find=decision.find, replace=decision.replace)
    return None


def agent_skills(session: SkillSession) -> list[tuple[str, str]]:
    """(name, description) of the agent-written skills in RUNNER_HOME/skills the review may patch."""
    usage = session.usage.read()
    return sorted(
        (s.name, s.description)
        for s in session.catalog.skills.values()
        if s.source == "home" and (usage.get(s.name) is not None and usage[s.name].created_by == "agent")
    )


def review(
    model: SideModel,
    session: SkillSession,
    messages: Sequence[dict[str, Any]],
    *,
    timeout: float | None,
    max_tokens: int,
) -> tuple[PricedReply, Decision | Exception]:
    """Ask once; the reply (always counted by the caller) and the decision or why there is none."""
    reply = model.complete(request(messages, agent_skills(session)), timeout=timeout, max_tokens=max_tokens)
    try:
        return reply, parse_decision(reply.text)
    except ReviewError as exc:
        return reply, exc
