"""The corpora in tests/safety/data, classified entry by entry.

The data files are only ever passed to ``classify``; nothing here runs them.
"""

from __future__ import annotations

import pytest

from runner.safety.shell import classify
from tests.safety.corpus import load

HARDLINE = load("hardline")
DANGEROUS = load("dangerous")
BENIGN = load("benign")


def _id(command: str) -> str:
    return command.replace("\n", "⏎")[:50]


def test_corpora_are_large_enough() -> None:
    assert len(HARDLINE) >= 60
    assert len(DANGEROUS) >= 60
    assert len(BENIGN) >= 80


def test_multi_line_blocks_are_read_as_one_entry() -> None:
    heredoc = [c for c in HARDLINE if c.startswith("bash <<END_OF_SCRIPT")]
    assert heredoc == ["bash <<END_OF_SCRIPT\nrm -rf /\nEND_OF_SCRIPT"]
    assert not any(c == "---" for c in HARDLINE + DANGEROUS + BENIGN)


@pytest.mark.parametrize("command", HARDLINE, ids=_id)
def test_hardline_corpus(command: str) -> None:
    verdict = classify(command)
    assert verdict.level == "hardline", verdict.reasons
    assert verdict.reasons
    assert verdict.flagged


@pytest.mark.parametrize("command", DANGEROUS, ids=_id)
def test_dangerous_corpus(command: str) -> None:
    verdict = classify(command)
    assert verdict.level == "dangerous", verdict.reasons
    assert verdict.reasons


def test_benign_corpus_has_no_hardline_and_at_most_one_dangerous() -> None:
    verdicts = {command: classify(command) for command in BENIGN}
    hardline = [c for c, v in verdicts.items() if v.level == "hardline"]
    dangerous = [c for c, v in verdicts.items() if v.level == "dangerous"]
    assert hardline == []
    assert len(dangerous) <= 1, dangerous
    assert all(v.reasons == () for v in verdicts.values() if v.level == "safe")
