"""Properties of ``classify`` over generated input and over the corpora."""

from __future__ import annotations

import shlex

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.safety.shell import Verdict, classify
from tests.safety.corpus import load

HARDLINE = load("hardline")
DANGEROUS = load("dangerous")
BENIGN = load("benign")
LEVELS = ("safe", "dangerous", "hardline")
RANK = {level: i for i, level in enumerate(LEVELS)}
INTERNAL_ERROR = "internal classifier error: failing closed"

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Text made of the characters the tokenizer treats specially, so generated input reaches
# quoting, substitution, here-document and redirection code instead of plain words.
shellish = st.text(alphabet=st.sampled_from(list("ab rm-f/ $(){}[]'\"\\`|&;<>\n#=~*!\t0123")), max_size=80)
fragments = st.lists(st.sampled_from(HARDLINE + DANGEROUS + BENIGN + ("$(", ")", "'", '"', "<<E", "\nE\n", "\\")))


def _valid(verdict: Verdict) -> None:
    assert verdict.level in LEVELS
    assert INTERNAL_ERROR not in verdict.reasons
    assert (verdict.level == "safe") == (verdict.reasons == ())
    assert all(isinstance(s, str) for s in verdict.segments + verdict.flagged)


@SETTINGS
@given(st.text())
def test_any_text_gives_a_valid_verdict(text: str) -> None:
    _valid(classify(text))


@SETTINGS
@given(shellish)
def test_shell_like_text_gives_a_valid_verdict(text: str) -> None:
    _valid(classify(text))


@SETTINGS
@given(fragments)
def test_spliced_corpus_fragments_give_a_valid_verdict(parts: list[str]) -> None:
    _valid(classify(" ".join(parts)))


def _then(command: str, more: str) -> str:
    """``command`` followed by ``more`` as a separate command. A multi-line entry may end
    in a here-document delimiter, which must stay alone on its line."""
    return f"{command}\n{more}" if "\n" in command else f"{command}; {more}"


@SETTINGS
@given(st.sampled_from(BENIGN))
def test_appending_rm_rf_root_to_a_benign_command_is_hardline(command: str) -> None:
    assert classify(_then(command, "rm -rf /")).level == "hardline"


@SETTINGS
@given(st.sampled_from(BENIGN), st.sampled_from(HARDLINE + DANGEROUS))
def test_a_benign_prefix_never_lowers_the_level(prefix: str, command: str) -> None:
    combined = classify(_then(prefix, command)).level
    assert RANK[combined] >= RANK[classify(command).level]


# sudo only applies to the first simple command: "sudo x=rm; $x -rf /" really is harmless
# ($x is unset afterwards), so entries that begin with an assignment are not wrapped.
@SETTINGS
@given(st.sampled_from([c for c in HARDLINE if "=" not in c.split(" ")[0]]))
def test_sudo_keeps_hardline(command: str) -> None:
    assert classify(f"sudo {command}").level == "hardline"


@SETTINGS
@given(st.sampled_from(HARDLINE), st.sampled_from(["bash", "sh", "zsh", "dash"]))
def test_shell_dash_c_keeps_hardline(command: str, shell: str) -> None:
    assert classify(f"{shell} -c {shlex.quote(command)}").level == "hardline"


@SETTINGS
@given(st.sampled_from(HARDLINE))
def test_command_substitution_keeps_hardline(command: str) -> None:
    # the newline lets a trailing here-document delimiter stand on its own line
    assert classify(f"$({command}\n)").level == "hardline"


@SETTINGS
@given(st.sampled_from(HARDLINE))
def test_nested_wrappers_keep_hardline(command: str) -> None:
    wrapped = f"sudo -u root env X=1 bash -c {shlex.quote(f'echo start; {command}')}"
    assert classify(wrapped).level == "hardline"
