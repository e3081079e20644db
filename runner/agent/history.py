"""The invariant every request's conversation keeps, checked before it is sent.

Every chat API rejects a history in which a tool result has no call to answer, or a call has no
result: a 400 on every retry. So before each request the loop asks ``history_problem``:

- a ``tool`` message answers a ``tool_calls`` entry of the assistant message right before it
  (only other tool messages between them), and its ``tool_call_id`` names that entry;
- every entry of an assistant turn's ``tool_calls`` gets exactly one answer, in the tool
  messages that follow that turn directly;
- the ids of one turn's calls are distinct.

One pass over the messages: about a microsecond per message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def history_problem(messages: Sequence[dict[str, Any]]) -> str | None:
    """What makes ``messages`` invalid to send, in one line; None when it is valid."""
    waiting: dict[str, int] = {}  # the open turn's call ids not answered yet
    turn = -1  # index of the assistant message whose calls are open
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "tool":
            call_id = m.get("tool_call_id")
            if turn < 0:
                return f"message {i} is a tool result ({call_id!r}) with no assistant tool call before it"
            if call_id not in waiting:
                calls = messages[turn].get("tool_calls") or []
                if any(c.get("id") == call_id for c in calls):
                    return f"message {i} answers tool call {call_id!r} a second time"
                return f"message {i} answers tool call {call_id!r}, which message {turn} did not make"
            del waiting[call_id]
            continue
        if waiting:
            return f"message {turn} has tool calls with no result: {', '.join(sorted(waiting))}"
        turn = -1
        if role == "assistant" and m.get("tool_calls"):
            ids = [c.get("id") for c in m["tool_calls"]]
            if len(set(ids)) != len(ids):
                return f"message {i} makes two tool calls with the same id"
            waiting = {str(c): i for c in ids}
            turn = i
    if waiting:
        return f"message {turn} has tool calls with no result: {', '.join(sorted(waiting))}"
    return None
