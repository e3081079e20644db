"""``allow:`` patterns match a dangerous command argument by argument (issue 13).

Only ``decide`` is called: nothing here runs a command.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.safety.approval import decide


def approved_by_pattern(command: str, *patterns: str) -> bool:
    decision = decide(command, policy="deny", allow=patterns, callback=None)
    return decision.allowed and decision.decided_by == "allow"


@pytest.mark.parametrize(
    ("command", "pattern"),
    [
        ("rm -rf ./build", "rm -rf ./build*"),
        ("rm -rf ./build-old", "rm -rf ./build*"),
        ("rm  -rf   ./build", "rm -rf ./build"),  # spacing is not part of a word
        ("rm -rf './build'", "rm -rf ./build"),  # nor is quoting
        ("git push --force", "git push --force*"),
        ("git push --force origin feature-x", "git push --force origin feature-*"),
        ("rm -rf ./build; rm -rf ./build2", "rm -rf ./build*"),  # every flagged part matches
    ],
)
def test_pattern_approves_matching_words(command: str, pattern: str) -> None:
    assert approved_by_pattern(command, pattern)


@pytest.mark.parametrize(
    ("command", "pattern"),
    [
        ("rm -rf ./build ~/.ssh", "rm -rf ./build*"),  # the example: * never spans words
        ("rm -rf ./build ./src", "rm -rf ./build*"),
        ("rm -rf ./build; rm -rf ./src", "rm -rf ./build*"),  # nor segments
        ("rm -rf ./build | cat; rm -rf ./x", "rm -rf ./build*"),
        ("rm -rf build", "*"),  # a lone * is one word, not "anything"
        ("rm -rf build", "rm *"),
        ("rm -rf ./build/../..", "rm -rf ./build*"),  # * does not climb out of the folder
        ("rm -rf ./build/src", "rm -rf ./build*"),  # nor cross a /
        ("echo $(rm -rf ./build)", "echo *"),  # a substitution matches only itself
        ("git push --force origin main", "git push --force*"),
        ("rm -rf ./build <<EOF\nx\nEOF", "rm -rf ./build <<EOF"),  # here-document bodies are unseen
        ("rm -rf ./build > out.txt", "rm -rf ./build"),  # a redirect is part of the command
    ],
)
def test_pattern_never_approves_more_than_its_words(command: str, pattern: str) -> None:
    assert not approved_by_pattern(command, pattern)


def test_hardline_is_never_approved_by_a_pattern() -> None:
    assert not decide("rm -rf ~", policy="approve", allow=("rm -rf *",), callback=None).allowed


def test_unparseable_pattern_approves_nothing() -> None:
    assert not approved_by_pattern("rm -rf ./build", "rm -rf './build")


_word = st.text(alphabet="ab./-~", min_size=1, max_size=6)


@settings(max_examples=200, deadline=None)
@given(st.lists(_word, min_size=1, max_size=3), st.lists(_word, min_size=1, max_size=3))
def test_star_in_a_pattern_never_matches_an_extra_word(prefix: list[str], extra: list[str]) -> None:
    """``rm -rf P*`` approves ``rm -rf W`` for a word W, never ``rm -rf W X...``."""
    pattern = "rm -rf ./" + "".join(prefix) + "*"
    command = "rm -rf ./" + "".join(prefix) + "x " + " ".join(extra)
    assert not approved_by_pattern(command, pattern)
