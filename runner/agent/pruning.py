"""Context pruning: keep each request under the job's token budget without losing the thread,
and without spoiling the provider's prompt cache.

Providers bill prompt tokens they served from their prefix cache at a fraction of the input price
(OpenAI's automatic caching, Anthropic's ``cache_control``, DeepSeek, Gemini implicit caching):
any request whose beginning is byte-identical to an earlier one's. So pruning cuts in large, rare
steps and never rewrites what it already pruned:

- until the conversation passes ``budget`` tokens, nothing changes (requests only append);
- then one prune takes everything between the *frontier* (the end of what earlier prunes left)
  and the protected tail: older tool results become one-line summaries
  (``[terminal] ran 'git log --stat' -> exit 0, 312 lines``), long texts are trimmed, and with
  ``summarize: true`` those turns become one reference-only background note instead. The
  frontier moves to the tail: from then on the system message, the first user message and the
  pruned region are byte-identical in every request until the next prune;
- the protected tail is the newest ``KEEP_TURNS`` turns (an assistant message with its tool
  results), whole and untouched, fewer only when they would fill more than ``PROTECT_CAP`` of the
  budget (never fewer than the newest turn);
- a file read several times keeps only its newest full copy (older copies after the frontier say
  "superseded");
- below the budget, a prune also comes when it pays for itself (the ski-rental rule): every
  request carries the prunable tokens (whole tool results between the frontier and the tail) at
  the cached price, and a prune costs re-sending the tail at the full price instead of the cached
  one; once ``cached_ratio`` x the prunable tokens carried since the last prune reaches
  ``(1 - cached_ratio)`` x the tail, the prune comes (with ``summarize: true`` only at the budget:
  each of its prunes is a model call). With 20 KB tool results the budget comes first; with small
  ones a prune comes every 8 turns or so instead of once the budget is full;
- only when the pruned region itself has grown so large that a prune would leave less than
  ``ROOM`` of the budget free is it replaced as a whole (one summary, or one "N earlier messages
  were pruned" note): a rare, full cache miss. As a last resort the oldest whole turns go until
  the request fits.
The system message and the first user message are never touched; a tool call is never split from
its results.
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
KEEP_TURNS = 10  # the newest turns a prune leaves whole
PROTECT_CAP = 0.7  # ... unless they fill more than this share of the budget
ROOM = 0.25  # a prune leaves at least this share of the budget free for the next turns to append
CACHED_RATIO = 0.25  # cached input price / input price when the provider's prices do not say (OpenAI, Gemini)
DROPPED = "earlier messages were pruned to fit the context]"


def cached_ratio(pricing: Any) -> float:
    """The provider's cached input price over its input price (a ``Pricing``), when both are set;
    else ``CACHED_RATIO``."""
    if pricing.cached_input_per_mtok is None or not pricing.input_per_mtok:
        return CACHED_RATIO
    return float(pricing.cached_input_per_mtok / pricing.input_per_mtok)


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
    cached_ratio: float = CACHED_RATIO  # the provider's cached input price / its input price
    frontier: int = 2  # messages before it are pruned already and stay byte-identical
    carried: int = 0  # prunable tokens sent since the last prune, summed over the requests

    def __call__(self, messages: list[dict[str, Any]]) -> list[AuxReply]:
        """Prune ``messages`` in place; returns the summary replies the model gave (to be counted)."""
        before = total(messages, self.tools_tokens)
        frontier = self._frontier(messages)
        tail = max(frontier, self._protected_from(messages, frontier))
        if before <= self.budget and not self._pays(messages, frontier, tail):
            return []
        self.carried = 0
        calls = _calls_by_id(messages)
        deduped = self._dedupe_reads(messages, calls, frontier)
        replies: list[AuxReply] = []
        turns = self._summarize_middle(messages, frontier, tail, replies)
        if turns:
            tail = frontier + 1
        results = self._summarize_old(messages, calls, frontier, tail)
        trimmed = self._trim_old_text(messages, frontier, tail)
        dropped = 0
        if total(messages, self.tools_tokens) > self.budget * (1 - ROOM):
            tail, folded, gone = self._fold_pruned(messages, tail, replies)
            turns += folded
            dropped += gone
        tail, gone = self._drop_oldest(messages, tail)
        dropped += gone
        self.frontier = tail
        after = total(messages, self.tools_tokens)
        if self.emit:
            self.emit(Event.PRUNE, Prune(before, after, self.budget, deduped, turns, results, trimmed, dropped))
        return replies

    def _pays(self, messages: list[dict[str, Any]], frontier: int, tail: int) -> bool:
        """Whether a prune below the budget pays for itself: the prunable tokens carried (at the
        cached price) since the last prune outweigh re-sending the tail (at the full price)."""
        if self.summarize is not None:
            return False
        prunable = sum(
            estimate(m) for m in messages[frontier:tail] if m.get("role") == "tool" and not m["content"].startswith("[")
        )
        if not prunable:
            return False
        self.carried += prunable
        ratio = min(0.5, max(0.05, self.cached_ratio))
        resend = total(messages[tail:])
        return ratio * self.carried >= (1 - ratio) * resend

    def _frontier(self, messages: list[dict[str, Any]]) -> int:
        """Where the last prune stopped (within the conversation, at a turn's start)."""
        index = max(2, min(self.frontier, len(messages)))
        while index > 2 and index < len(messages) and messages[index].get("role") == "tool":
            index -= 1
        return index

    def _protected_from(self, messages: list[dict[str, Any]], frontier: int) -> int:
        """Index of the first message of the protected tail: the newest ``KEEP_TURNS`` whole turns
        (each starts at an assistant message, so a tool result is never split from its call),
        fewer when they would pass ``PROTECT_CAP`` of the budget, never fewer than one."""
        starts = [i for i in range(frontier, len(messages)) if messages[i].get("role") == "assistant"]
        if not starts:
            return max(frontier, len(messages) - 1)
        starts = starts[-KEEP_TURNS:]
        room = int(self.budget * PROTECT_CAP)
        sizes = [estimate(m) for m in messages]
        while len(starts) > 1 and sum(sizes[starts[0] :]) > room:
            starts.pop(0)
        return starts[0]

    def _summarize_middle(self, messages: list[dict[str, Any]], start: int, stop: int, replies: list[AuxReply]) -> int:
        """Replace the turns between the frontier and the protected tail by one reference-only
        summary from the model (after the earlier summaries, which stay as they are).
        A failed summary call is recorded (``summary_failed``) and mechanical pruning goes on."""
        if self.summarize is None or stop - start < 2:  # at least one whole turn
            return 0
        middle = messages[start:stop]
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
        messages[start:stop] = [{"role": "user", "content": SUMMARY_HEADER + summary}]
        return len(middle)

    def _fold_pruned(self, messages: list[dict[str, Any]], tail: int, replies: list[AuxReply]) -> tuple[int, int, int]:
        """The rare big step: the whole pruned region (``messages[2:tail]``) becomes one summary
        (``summarize: true``) or one note saying how many messages went. Returns the new tail
        index, the messages summarised and the messages dropped."""
        if tail - 2 < 2:
            return tail, 0, 0
        folded = self._summarize_middle(messages, 2, tail, replies)
        if folded:
            return 3, folded, 0
        gone = [m for m in messages[2:tail] if not str(m.get("content") or "").endswith(DROPPED)]
        messages[2:tail] = [{"role": "user", "content": f"[{len(gone)} {DROPPED}"}]
        return 3, 0, len(gone)

    def _dedupe_reads(self, messages: list[dict[str, Any]], calls: dict[str, Any], frontier: int) -> int:
        newest: dict[str, int] = {}
        count = 0
        for i, m in enumerate(messages):
            if m.get("role") != "tool":
                continue
            name, args = calls.get(m.get("tool_call_id", ""), ("", {}))
            if name != "read_file" or "path" not in args:
                continue
            key = json.dumps(args, sort_keys=True)
            old_index = newest.get(key)
            if old_index is not None and old_index >= frontier:  # an older copy, even in the protected tail
                old = messages[old_index]
                if not old["content"].startswith("[read_file]"):
                    old["content"] = f"[read_file] {args['path']} -> superseded by a later read of the same file"
                    count += 1
            newest[key] = i
        return count

    def _summarize_old(self, messages: list[dict[str, Any]], calls: dict[str, Any], start: int, stop: int) -> int:
        count = 0
        for i in range(start, stop):
            m = messages[i]
            if m.get("role") != "tool" or m["content"].startswith("["):
                continue
            name, args = calls.get(m.get("tool_call_id", ""), ("tool", {}))
            m["content"] = summarize_result(name, args, m["content"])
            count += 1
        return count

    def _trim_old_text(self, messages: list[dict[str, Any]], start: int, stop: int) -> int:
        count = 0
        for i in range(start, stop):
            m = messages[i]
            text = m.get("content") or ""
            if m.get("role") in ("assistant", "user") and len(text) > 400 and not text.startswith(SUMMARY_HEADER):
                m["content"] = text[:300] + f" [... {len(text) - 300} characters pruned]"
                count += 1
        return count

    def _drop_oldest(self, messages: list[dict[str, Any]], tail: int) -> tuple[int, int]:
        """Last resort, when even the protected tail does not fit: drop whole oldest turns (an
        assistant message with its tool results), never the newest. Returns the new tail index
        and the messages dropped."""
        dropped = 0
        while total(messages, self.tools_tokens) > self.budget and len(messages) > 4:
            end = 3
            while end < len(messages) and messages[end].get("role") == "tool":
                end += 1
            if end >= len(messages) - 1:
                break
            gone = [m for m in messages[2:end] if not str(m.get("content") or "").endswith(DROPPED)]
            dropped += len(gone)
            del messages[2:end]
            tail = max(2, tail - (end - 2))
        if dropped:
            messages.insert(2, {"role": "user", "content": f"[{dropped} {DROPPED}"})
            tail += 1
        return tail, dropped
