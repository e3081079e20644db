"""runner.lazyre.LazyPattern: compiled at the first call, then the compiled pattern's own methods."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from runner.lazyre import LazyPattern


def test_nothing_is_compiled_until_first_use() -> None:
    pattern = LazyPattern(r"(?P<word>[a-z]+)(", re.I)  # invalid: an import would raise at once
    assert pattern.pattern == r"(?P<word>[a-z]+)("
    try:
        pattern.search("x")
    except re.error:
        pass
    else:
        raise AssertionError("an invalid pattern must raise at its first use")


def test_after_the_first_call_the_compiled_methods_are_used() -> None:
    pattern = LazyPattern(r"(?P<n>\d+)")
    assert "search" not in vars(pattern)
    assert pattern.search("ab 12").group("n") == "12"  # type: ignore[union-attr]
    compiled = re.compile(r"(?P<n>\d+)")
    assert vars(pattern)["search"] == compiled.search and vars(pattern)["finditer"] == compiled.finditer
    assert pattern.groupindex == {"n": 1} and pattern.flags == compiled.flags
    assert repr(pattern) == "LazyPattern('(?P<n>\\\\d+)')"


@given(st.text(alphabet="ab1 -\n", max_size=30), st.integers(0, 5))
def test_every_method_answers_as_re_does(text: str, pos: int) -> None:
    source, flags = r"(a+)(?:-|\d)?", re.M
    lazy, real = LazyPattern(source, flags), re.compile(source, flags)
    assert _spans(lazy.search(text, pos)) == _spans(real.search(text, pos))
    assert _spans(lazy.match(text, pos)) == _spans(real.match(text, pos))
    assert _spans(lazy.fullmatch(text)) == _spans(real.fullmatch(text))
    assert [m.span() for m in lazy.finditer(text)] == [m.span() for m in real.finditer(text)]
    assert lazy.findall(text) == real.findall(text)
    assert lazy.sub("<\\1>", text) == real.sub("<\\1>", text) and lazy.subn("x", text, 1) == real.subn("x", text, 1)
    assert lazy.split(text) == real.split(text)


def _spans(match: re.Match[str] | None) -> tuple[int, int] | None:
    return None if match is None else match.span()
