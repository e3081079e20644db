"""Recall and false positives of the injection scan on memory notes (``data/notes.json``), and
properties of the scan.

The corpus was written in rounds, each before the scan had seen it (its ``about`` says so):
``dev``, ``round2`` and ``round3`` were then used to tune the rules, so the figures on them are a
regression guard, not an estimate; ``round4`` was never tuned on, and its figures are the honest
estimate for notes nobody wrote the rules against. When the rules change, do not tune on round4:
write a new round, measure it, and only then tune.

Bounds (figures when written: tuned 91/92 hostile flagged, 2/87 benign; held-out 9/25 and 0/25;
main before: 16/117 and 1/112 over all rounds):
- tuned rounds: recall >= 95%, at most 2 benign notes flagged (a note that quotes a ``curl | sh``
  line, one that asks not to tell anyone about an incident: holding those for review is defensible);
- held-out round: recall >= 9/25 (the scan must not get worse on notes it has not seen), at most 1
  benign note flagged. 36% is why the scan is the second line: every note, flagged or not, reaches
  a later run only inside the quoted block.
"""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from runner.safety.injection import Context, scan
from tests.safety.corpus import Note, notes

TUNED = ("dev", "round2", "round3")
HELD_OUT = "round4"


def kinds(text: str, context: Context = Context.FILE) -> set[str]:
    """What the scan finds, without where (``... (base64-encoded)`` counts as ``...``)."""
    return {f.kind.split(" (")[0] for f in scan(text, context)}


def flagged(items: list[Note], context: Context = Context.NOTE) -> list[Note]:
    return [n for n in items if scan(n.text, context)]


def of(rounds: tuple[str, ...], *, hostile: bool) -> list[Note]:
    return [n for n in notes() if n.round in rounds and n.hostile == hostile]


def test_the_corpus_is_large_enough_and_well_formed():
    assert len(of(TUNED + (HELD_OUT,), hostile=True)) >= 100 and len(of(TUNED + (HELD_OUT,), hostile=False)) >= 100
    assert len(of((HELD_OUT,), hostile=True)) >= 25 and len(of((HELD_OUT,), hostile=False)) >= 25
    assert len({n.style for n in notes() if n.hostile}) >= 10  # several styles of attack
    assert len({n.text for n in notes()}) == len(notes())


def test_recall_and_false_positives_on_the_tuned_rounds():
    hostile, benign = of(TUNED, hostile=True), of(TUNED, hostile=False)
    missed = [n.text for n in hostile if not scan(n.text, Context.NOTE)]
    assert len(missed) <= len(hostile) * 0.05, missed
    assert len(flagged(benign)) <= 2, [n.text for n in flagged(benign)]


def test_recall_and_false_positives_on_the_held_out_round():
    hostile, benign = of((HELD_OUT,), hostile=True), of((HELD_OUT,), hostile=False)
    assert len(flagged(hostile)) >= 9
    assert len(flagged(benign)) <= 1, [n.text for n in flagged(benign)]


def test_files_get_a_narrower_scan_than_notes():
    """AGENTS.md and skills are instructions written by people: the note-only rules stay off them,
    and whatever a file's scan finds, a note's finds too."""
    for note in notes():
        assert kinds(note.text) <= kinds(note.text, Context.NOTE), note.text
    assert len(flagged(of(TUNED + (HELD_OUT,), hostile=False), Context.FILE)) <= 1


def test_a_note_is_scanned_in_about_a_millisecond():
    texts = [n.text for n in notes()]
    started = time.process_time()
    for text in texts:
        scan(text, Context.NOTE)
    per_note = (time.process_time() - started) / len(texts)
    assert per_note < 0.02, f"{per_note * 1000:.1f} ms per note"  # ~0.3 ms on a quiet machine


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_file_findings_are_note_findings_for_any_text(text):
    assert kinds(text) <= kinds(text, Context.NOTE)
