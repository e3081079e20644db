"""The notebook value: its entry format round-trips (hypothesis), the cap, unique old_text, scopes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.memory.notebook import (
    CAP_CHARS,
    DELIMITER,
    MemoryRefused,
    Notebook,
    Scope,
    ScopeKind,
    job_scope,
    parse,
    parse_scope,
    render,
)

# an entry as the notebook keeps it: stripped, not empty, no line that is only the mark
entry = (
    st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=80)
    .map(lambda s: s.replace("\r", ""))
    .map(str.strip)
    .filter(lambda s: s and all(line.strip() != "§" for line in s.split("\n")))
)


@given(st.lists(entry, max_size=12, unique=True))
def test_render_then_parse_gives_the_entries_back(entries: list[str]) -> None:
    assert parse(render(tuple(entries))) == tuple(entries)


@given(st.text(max_size=400))
def test_parse_never_fails_and_its_entries_render_back_to_themselves(text: str) -> None:
    entries = parse(text)
    assert all(e == e.strip() and e for e in entries)
    assert len(set(entries)) == len(entries)
    assert parse(render(entries)) == entries


@given(st.lists(entry, max_size=30))
def test_adds_keep_the_notebook_within_its_cap(entries: list[str]) -> None:
    nb = Notebook(cap=200)
    for e in entries:
        try:
            nb = nb.add(e)
        except MemoryRefused as exc:
            assert "notebook full" in str(exc)
        assert nb.chars <= 200


def test_chars_count_the_delimiters() -> None:
    nb = Notebook(("ab", "cd"))
    assert nb.chars == 4 + len(DELIMITER) and Notebook().chars == 0 and CAP_CHARS == 1_800


def test_add_is_idempotent_and_strips() -> None:
    nb = Notebook().add("  fact  ")
    assert nb.add("fact") == nb and nb.entries == ("fact",)


def test_replace_and_remove_need_one_matching_entry() -> None:
    nb = Notebook(("alpha one", "alpha two", "beta"))
    with pytest.raises(MemoryRefused, match="2 entries contain 'alpha'"):
        nb.replace("alpha", "x")
    with pytest.raises(MemoryRefused, match="no entry contains 'gamma'"):
        nb.remove("gamma")
    with pytest.raises(MemoryRefused, match="old_text is empty"):
        nb.remove("  ")
    assert nb.replace("two", "beta").entries == ("alpha one", "beta")  # a duplicate is kept once
    assert nb.remove("beta").entries == ("alpha one", "alpha two")


def test_entries_may_not_hold_the_separator_line() -> None:
    with pytest.raises(MemoryRefused, match="separates entries"):
        Notebook().add("one\n§\ntwo")
    with pytest.raises(MemoryRefused, match="content is empty"):
        Notebook().add(" \n ")


names = st.from_regex(r"[a-z0-9][a-z0-9_-]{0,63}", fullmatch=True)


@given(st.sampled_from(list(ScopeKind)), names)
def test_a_scope_key_parses_back_to_the_scope(kind: ScopeKind, name: str) -> None:
    scope = Scope(kind, name)
    assert parse_scope(scope.key) == scope
    assert job_scope(f"shared:{name}", "j") == Scope(ScopeKind.SHARED, name)


@given(st.text(max_size=80))
def test_parse_scope_accepts_only_what_it_can_give_back(text: str) -> None:
    try:
        scope = parse_scope(text)
    except ValueError:
        return
    assert scope.key == (text if ":" in text else f"job:{text}")


def test_scopes() -> None:
    assert job_scope("job", "nightly") == Scope(ScopeKind.JOB, "nightly")
    assert job_scope("shared:team", "nightly") == Scope(ScopeKind.SHARED, "team")
    assert job_scope("off", "nightly") is None
    assert parse_scope("nightly").key == "job:nightly" and parse_scope("shared:t").key == "shared:t"
    for bad in ("Bad", "other:x", "shared:", "shared:Has Space", "notes\n", "shared:t\n"):
        with pytest.raises(ValueError):
            parse_scope(bad)
