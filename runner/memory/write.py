"""A memory write from a run: checked, redacted, stored, recorded.

Order: the injection scan on the text as the model wrote it (a finding refuses the write),
then redaction (a secret is masked before it is stored), then the notebook's own rules (cap,
unique ``old_text``) inside the store transaction. Every attempt is a run event:
``memory_write`` when stored, ``memory_refused`` with the reason when not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runner.memory.notebook import Action, MemoryRefused, Notebook, Scope
from runner.memory.notebooks import change
from runner.store import Store

Emit = Callable[[str, dict[str, Any]], None]


@dataclass(frozen=True)
class Binding:
    """One run's notebook: where writes go, and the run's redactor (its pool keys included)."""

    store: Store
    scope: Scope
    run_id: str
    redact: Callable[[str], str]


def check_text(text: str, what: str) -> None:
    """MemoryRefused when ``text`` looks like a prompt injection."""
    from runner.safety.injection import scan

    findings = scan(text)
    if findings:
        kinds = "; ".join(sorted({f.kind for f in findings}))
        raise MemoryRefused(f"{what} looks like a prompt injection ({kinds}); nothing was stored")


def write(binding: Binding, action: Action, content: str, old_text: str, emit: Emit) -> str:
    """Apply one write; the line the model reads. MemoryRefused (also recorded) when nothing was stored."""
    event: dict[str, Any] = {"scope": binding.scope.key, "action": str(action)}
    try:
        edit, masked = _edit(binding, action, content, old_text)
        before, after = change(binding.store, binding.scope, edit, by=binding.run_id)
    except MemoryRefused as exc:
        emit("memory_refused", {**event, "reason": str(exc)})
        raise
    emit("memory_write", {**event, "content": masked, "old_text": old_text[:200], "usage": after.usage()})
    if after.entries == before.entries:
        return f"unchanged: that entry is already in the notebook ({after.usage()})"
    done = {Action.ADD: "added", Action.REPLACE: "replaced", Action.REMOVE: "removed"}[action]
    note = " (a secret in it was masked)" if masked != content.strip() and action != Action.REMOVE else ""
    return f"{done}{note}; notebook {binding.scope}: {after.usage()}. Applies from the next run."


def _edit(binding: Binding, action: Action, content: str, old_text: str) -> tuple[Callable[[Notebook], Notebook], str]:
    if action == Action.REMOVE:
        return (lambda nb: nb.remove(old_text)), ""
    check_text(content, "content")
    masked = binding.redact(content.strip())
    if action == Action.ADD:
        return (lambda nb: nb.add(masked)), masked
    return (lambda nb: nb.replace(old_text, masked)), masked


def snapshot(notebook: Notebook, scope: Scope, *, writable: bool) -> str:
    """The block the system prompt carries for the run (empty for an empty notebook). Entries that
    fail the injection scan now (stored before a rule was added) are shown as a marker."""
    if not notebook.entries:
        return ""
    from runner.safety.injection import blocked_marker, scan

    shown = []
    for entry in notebook.entries:
        findings = scan(entry)
        shown.append(blocked_marker("a memory entry", findings) if findings else entry)
    how = "memory tool writes apply next run" if writable else "read-only in this run"
    head = f"## Memory ({scope}, {notebook.usage()}; {how})"
    return head + "\n" + "\n§\n".join(shown)
