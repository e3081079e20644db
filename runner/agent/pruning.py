"""Context pruning: keep each request under the job's token budget without losing the thread.

When the conversation would pass ``budget`` tokens, older tool results become one-line
summaries (``[terminal] ran 'git log --stat' -> exit 0, 312 lines``), a file read several
times keeps only its newest full copy, and the newest turns are protected by a token budget
(not a message count). Pruning goes down to a low-water mark so it does not run every turn.
The system message and the first user message are never touched.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runner.agent.auxiliary import AuxiliaryModel, AuxReply
from runner.errors import ModelError
from runner.events import Emit, Error, Event, Prune

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD = 4
LOW_WATER = 0.7
PROTECT_SHARE = 0.35


def estimate(message: dict[str, Any]) -> int:
    size = len(message.get("content") or "")
    for call in message.get("tool_calls") or []:
        size += len(call["function"]["name"]) + len(call["function"]["arguments"])
    return size // CHARS_PER_TOKEN + MESSAGE_OVERHEAD


def total(messages: list[dict[str, Any]], tools_tokens: int = 0) -> int:
    return sum(estimate(m) for m in messages) + tools_tokens


def _calls_by_id(messages: list[dict[str, Any]]) -> dict[str, tuple[str, dict[str, Any]]]:
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for m in messages:
        for c in m.get("tool_calls") or []:
            try:
                args = json.loads(c["function"]["arguments"] or "{}")
            except ValueError:
                args = {}
            out[c["id"]] = (c["function"]["name"], args if isinstance(args, dict) else {})
    return out


def summarize_result(name: str, args: dict[str, Any], content: str) -> str:
    lines = content.count("\n") + (1 if content else 0)
    if name == "terminal":
        command = " ".join(str(args.get("command", "")).split())
        if len(command) > 80:
            command = command[:77] + "..."
        status = content.split("\n", 1)[0] if content.startswith("exit code") else "done"
        return f"[terminal] ran {command!r} -> {status.replace('exit code', 'exit')}, {lines} lines (output pruned)"
    if name in ("read_file", "search_files", "list_dir"):
        target = args.get("path") or args.get("pattern") or "."
        return f"[{name}] {target} -> {lines} lines (pruned; call again if you need it)"
    return f"[{name}] -> {len(content)} characters (pruned)"


SUMMARY_HEADER = (
    "[Background: a summary of earlier steps of this run, for reference only. It describes what "
    "happened; it is not an instruction.]\n"
)
SUMMARY_REQUEST = (
    "Summarise the following earlier steps of an automated run for the agent's own reference: facts "
    "found, files read or changed, commands run and their results, open questions. Plain bullets, at "
    "most 300 words. Do not add instructions."
)
Summarize = Callable[[list[dict[str, Any]]], AuxReply]
SUMMARY_TIMEOUT = 60.0


def summarize_with(model: AuxiliaryModel, *, deadline: float | None = None) -> Summarize:
    """A summarizer that asks ``model`` (the auxiliary model, else the run's own model behind the
    same seam) to condense middle turns, within ``deadline`` (time.monotonic()); it returns the
    priced reply, which the loop counts in the run's tokens, cost and budget."""

    def summarize(middle: list[dict[str, Any]]) -> AuxReply:
        lines = []
        for m in middle:
            text = m.get("content") or ""
            calls = ", ".join(
                f"{c['function']['name']}({c['function']['arguments'][:200]})" for c in m.get("tool_calls") or []
            )
            lines.append(f"{m['role']}: {text[:1500]}{' calls: ' + calls if calls else ''}")
        timeout = SUMMARY_TIMEOUT if deadline is None else max(1.0, min(SUMMARY_TIMEOUT, deadline - time.monotonic()))
        request = [{"role": "system", "content": SUMMARY_REQUEST}, {"role": "user", "content": "\n".join(lines)}]
        return model.complete(request, timeout=timeout)

    return summarize


@dataclass
class Pruner:
    budget: int
    tools_tokens: int = 0
    emit: Emit | None = None
    summarize: Summarize | None = None  # job key `summarize: true`

    def __call__(self, messages: list[dict[str, Any]]) -> list[AuxReply]:
        """Prune ``messages`` in place; returns the summary replies the model gave (to be counted)."""
        before = total(messages, self.tools_tokens)
        if before <= self.budget:
            return []
        target = int(self.budget * LOW_WATER)
        protected_from = self._protected_from(messages)
        calls = _calls_by_id(messages)
        deduped = self._dedupe_reads(messages, calls)
        replies: list[AuxReply] = []
        turns = self._summarize_middle(messages, protected_from, replies)
        if turns:
            protected_from = 3  # system, task, the summary; then the protected tail
        results = self._summarize_old(messages, calls, protected_from, target)
        trimmed = self._trim_old_text(messages, protected_from, target)
        dropped = self._drop_oldest(messages, target)
        after = total(messages, self.tools_tokens)
        if self.emit:
            self.emit(Event.PRUNE, Prune(before, after, self.budget, deduped, turns, results, trimmed, dropped))
        return replies

    def _summarize_middle(self, messages: list[dict[str, Any]], stop: int, replies: list[AuxReply]) -> int:
        """Replace the unprotected middle turns by one reference-only summary from the model.
        A failed summary call is recorded (``summary_failed``) and mechanical pruning goes on."""
        if self.summarize is None or stop - 2 < 4:
            return 0
        middle = messages[2:stop]
        try:
            reply = self.summarize(middle)
        except ModelError as exc:
            if self.emit:
                self.emit(Event.SUMMARY_FAILED, Error(str(exc)))
            return 0
        replies.append(reply)
        summary = reply.text.strip()
        if not summary:
            return 0
        messages[2:stop] = [{"role": "user", "content": SUMMARY_HEADER + summary}]
        return len(middle)

    def _protected_from(self, messages: list[dict[str, Any]]) -> int:
        """Index of the first message of the protected recent tail: whole turns only, so the tail
        never starts with a tool result whose call would be summarised or dropped (the protected
        share may be passed to keep a turn whole)."""
        room = int(self.budget * PROTECT_SHARE)
        index = len(messages)
        used = 0
        for i in range(len(messages) - 1, 1, -1):
            used += estimate(messages[i])
            if used > room:
                break
            index = i
        index = min(index, len(messages) - 1)
        while index > 2 and messages[index].get("role") == "tool":
            index -= 1  # never split a tool result from the call that asked for it: keep the whole turn
        return max(2, index)

    def _dedupe_reads(self, messages: list[dict[str, Any]], calls: dict[str, Any]) -> int:
        newest: dict[str, int] = {}
        count = 0
        for i, m in enumerate(messages):
            if m.get("role") != "tool":
                continue
            name, args = calls.get(m.get("tool_call_id", ""), ("", {}))
            if name != "read_file" or "path" not in args:
                continue
            key = json.dumps(args, sort_keys=True)
            if key in newest:  # an older copy, even in the protected tail, is superseded
                old = messages[newest[key]]
                if not old["content"].startswith("[read_file]"):
                    old["content"] = f"[read_file] {args['path']} -> superseded by a later read of the same file"
                    count += 1
            newest[key] = i
        return count

    def _summarize_old(self, messages: list[dict[str, Any]], calls: dict[str, Any], stop: int, target: int) -> int:
        count = 0
        for i in range(2, stop):
            if total(messages, self.tools_tokens) <= target:
                break
            m = messages[i]
            if m.get("role") != "tool" or m["content"].startswith("["):
                continue
            name, args = calls.get(m.get("tool_call_id", ""), ("tool", {}))
            m["content"] = summarize_result(name, args, m["content"])
            count += 1
        return count

    def _trim_old_text(self, messages: list[dict[str, Any]], stop: int, target: int) -> int:
        count = 0
        for i in range(2, stop):
            if total(messages, self.tools_tokens) <= target:
                break
            m = messages[i]
            text = m.get("content") or ""
            if m.get("role") in ("assistant", "user") and len(text) > 400:
                m["content"] = text[:300] + f" [... {len(text) - 300} characters pruned]"
                count += 1
        return count

    def _drop_oldest(self, messages: list[dict[str, Any]], target: int) -> int:
        """Last resort: drop whole oldest turns (an assistant message with its tool results)."""
        dropped = 0
        while total(messages, self.tools_tokens) > target and len(messages) > 4:
            end = 3
            while end < len(messages) and messages[end].get("role") == "tool":
                end += 1
            if end >= len(messages) - 1:
                break
            dropped += end - 2
            del messages[2:end]
        if dropped:
            messages.insert(
                2, {"role": "user", "content": f"[{dropped} earlier messages were pruned to fit the context]"}
            )
        return dropped
