"""Notes held for the operator: a run's write that the injection scan flags is kept aside
(``runner.store.memory_pending``), never shown to a run, until the operator accepts it into the
notebook or rejects it (``runner memory pending | accept | reject``).

A run cannot fill the queue: the same note held twice is one row, and a notebook with
``MAX_PENDING`` notes waiting refuses more (nothing is stored, the model is told why).
"""

from __future__ import annotations

from collections.abc import Callable

from runner.errors import UsageError
from runner.memory.notebook import Action, MemoryRefused, Notebook, parse_scope
from runner.memory.notebooks import change
from runner.safety.inside import refuse_inside_run
from runner.statuses import HeldState
from runner.store import Store
from runner.store.memory_pending import HeldNote, Hold, decide, get, insert, pending_count, same_pending

MAX_PENDING = 20  # per notebook: more is a run flooding the operator, not notes worth reading


class HeldRefused(UsageError):
    """``accept`` / ``reject`` of an id that is not pending (exit 2, one line)."""

    reason = "heldrefused"


def hold(store: Store, note: Hold) -> HeldNote:
    """Keep ``note`` for the operator (the pending note already holding it, if one does);
    MemoryRefused when its notebook has ``MAX_PENDING`` notes waiting."""
    with store.transaction():
        same = same_pending(store, note)
        if same is not None:
            return same
        if pending_count(store, note.scope) >= MAX_PENDING:
            raise MemoryRefused(
                f"{MAX_PENDING} notes of {note.scope} already wait for the operator's review; nothing was stored"
            )
        return insert(store, note)


def edit_for(note: HeldNote) -> Callable[[Notebook], Notebook]:
    """The notebook change the held write asked for."""
    if Action(note.action) == Action.REPLACE:
        return lambda nb: nb.replace(note.old_text, note.content)
    return lambda nb: nb.add(note.content)


def accept(store: Store, note_id: str, *, by: str) -> tuple[HeldNote, Notebook]:
    """Store the held note in its notebook as the operator's decision (no scan: the operator read
    it), in one transaction with marking it accepted; (the note, the notebook after).
    HeldRefused when it is not pending; MemoryRefused (nothing changes) when the notebook does not
    take it (over the cap, ``old_text`` no longer unique). Refused from inside a run: a run
    cannot accept the note it wrote (``runner.safety.inside``)."""

    refuse_inside_run("accept a held memory note")
    with store.transaction():
        note = _pending(store, note_id)
        _, after = change(store, parse_scope(note.scope), edit_for(note), by=by)
        decide(store, note.id, HeldState.ACCEPTED, by=by)
    return note, after


def reject(store: Store, note_id: str, *, by: str) -> HeldNote:
    """Drop the held note (kept as ``rejected`` for the record); HeldRefused when not pending."""

    refuse_inside_run("reject a held memory note")
    with store.transaction():
        note = _pending(store, note_id)
        decide(store, note.id, HeldState.REJECTED, by=by)
    return note


def _pending(store: Store, note_id: str) -> HeldNote:
    note = get(store, note_id)
    if note is None:
        raise HeldRefused(f"no held note {note_id}; see: runner memory pending")
    if note.status != HeldState.PENDING:
        raise HeldRefused(f"held note {note.id} was already {note.status} (by {note.decided_by} at {note.decided_at})")
    return note
