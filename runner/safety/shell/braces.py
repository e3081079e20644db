"""Bash brace expansion, complete but bounded: ``a{b,c{d,e}}f``, ``{1..5}``, ``{a..e..2}``.

Every group is followed, nested ones included, the way bash does it (leftmost group first,
each alternative expanded recursively, then the rest of the word). The result is capped at
``MAX_WORDS`` words and ``MAX_CHARS`` characters: above either the expansion raises
``ParseError`` and the classifier fails closed, so a word that expands to millions of
arguments can neither hide a command nor make classification slow.

``${...}`` is a parameter expansion, not a brace group.
"""

from __future__ import annotations

import re

from runner.safety.shell.syntax import ParseError

MAX_WORDS = 4096
MAX_CHARS = 1 << 20
_MAX_NESTING = 64
_SEQUENCE = re.compile(r"^(-?\d+|[A-Za-z])\.\.(-?\d+|[A-Za-z])(?:\.\.(-?\d+))?$")


class _Budget:
    __slots__ = ("chars",)

    def __init__(self) -> None:
        self.chars = MAX_CHARS


def brace_expand(value: str) -> list[str]:
    """The words ``value`` expands to (``[value]`` when it has no brace group)."""
    return _expand(value, _Budget(), 0)


def _expand(value: str, budget: _Budget, depth: int) -> list[str]:
    if depth > _MAX_NESTING:
        raise ParseError("brace expansion nested too deep")
    group = _first_group(value)
    if group is None:
        return [value]
    start, end, alternatives = group
    pre, post = value[:start], value[end + 1 :]
    tails = _expand(post, budget, depth + 1)
    out: list[str] = []
    for alt in alternatives:
        for middle in _expand(alt, budget, depth + 1):
            for tail in tails:
                word = pre + middle + tail
                budget.chars -= len(word)
                out.append(word)
                if len(out) > MAX_WORDS or budget.chars < 0:
                    raise ParseError(f"brace expansion over {MAX_WORDS} words")
    return out


def _first_group(value: str) -> tuple[int, int, list[str]] | None:
    """The leftmost ``{...}`` that is a brace group: its bounds and its alternatives.

    One pass with a stack pairs the braces and assigns each comma to the innermost open
    brace, so finding the group is linear in the length of the word."""
    stack: list[int] = []
    commas: dict[int, list[int]] = {}
    pairs: list[tuple[int, int]] = []
    i, n = 0, len(value)
    while i < n:
        c = value[i]
        if c == "{":
            if i > 0 and value[i - 1] == "$":  # ${name}: a parameter, skip to its end
                close = value.find("}", i)
                i = n if close < 0 else close + 1
                continue
            stack.append(i)
        elif c == "}" and stack:
            pairs.append((stack.pop(), i))
        elif c == "," and stack:
            commas.setdefault(stack[-1], []).append(i)
        i += 1
    for open_at, close_at in sorted(pairs):
        cuts = commas.get(open_at)
        if cuts:
            bounds = [open_at, *cuts, close_at]
            alternatives = [value[a + 1 : b] for a, b in zip(bounds, bounds[1:], strict=False)]
            return open_at, close_at, alternatives
        sequence = _sequence(value[open_at + 1 : close_at])
        if sequence is not None:
            return open_at, close_at, sequence
    return None


def _sequence(body: str) -> list[str] | None:
    """``1..5``, ``-1..-3``, ``a..e``, ``0..10..5``; None when ``body`` is not a sequence."""
    m = _SEQUENCE.match(body)
    if not m:
        return None
    first, last, step_text = m.groups()
    step = abs(int(step_text)) if step_text else 1
    step = step or 1
    if first.lstrip("-").isdigit() and last.lstrip("-").isdigit():
        a, b = int(first), int(last)
        if abs(b - a) // step + 1 > MAX_WORDS:
            raise ParseError(f"brace expansion over {MAX_WORDS} words")
        return [str(x) for x in range(a, b + (1 if b >= a else -1), step if b >= a else -step)]
    if first.isalpha() and last.isalpha():
        a, b = ord(first), ord(last)
        return [chr(x) for x in range(a, b + (1 if b >= a else -1), step if b >= a else -step)]
    return None
