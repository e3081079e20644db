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
_MAX_SEQUENCE_TEXT = 48  # "{-100000..100000..7}" and the like; longer bodies are not sequences


class _Budget:
    """Characters produced, and characters scanned while looking for groups: bash's search
    is quadratic on ``{{{{...}``; past ``4 * len + 64k`` scanned characters we fail closed."""

    __slots__ = ("chars", "scan")

    def __init__(self, length: int) -> None:
        self.chars = MAX_CHARS
        self.scan = 4 * length + 65536

    def scanned(self, n: int) -> None:
        self.scan -= n
        if self.scan < 0:
            raise ParseError("brace expansion too complex")


def brace_expand(value: str) -> list[str]:
    """The words ``value`` expands to (``[value]`` when it has no brace group)."""
    if "}" not in value:
        return [value]
    return _expand(value, _Budget(len(value)), 0)


def _expand(text: str, budget: _Budget, depth: int) -> list[str]:
    """bash's ``brace_expand``: preamble, the first valid group, and the rest."""
    if depth > _MAX_NESTING:
        raise ParseError("brace expansion nested too deep")
    i = 0
    while True:
        i = _gobble(text, i, "{", budget)
        if i < 0:
            return [text]
        close = _gobble(text, i + 1, "}", budget)
        if close >= 0:
            break
        i += 1
    pre, amble, post = text[:i], text[i + 1 : close], text[close + 1 :]
    if "," in amble:
        middles = [m for part in _split_amble(amble, budget) for m in _expand(part, budget, depth + 1)]
    else:
        sequence = _sequence(amble) if len(amble) <= _MAX_SEQUENCE_TEXT else None
        if sequence is None:
            if not post:
                return [text]
            sequence = ["{" + amble + "}"]
        middles = sequence
    tails = _expand(post, budget, depth + 1) if post else [""]
    out: list[str] = []
    for middle in middles:
        for tail in tails:
            word = pre + middle + tail
            budget.chars -= len(word)
            out.append(word)
            if len(out) > MAX_WORDS or budget.chars < 0:
                raise ParseError(f"brace expansion over {MAX_WORDS} words")
    return out


def _gobble(text: str, i: int, satisfy: str, budget: _Budget) -> int:
    """bash's ``brace_gobbler``: the index of the ``{`` that opens a group, the ``}``
    that closes one (only after a separator at its level), or the next separator."""
    level = 0
    separators = 0 if satisfy == "}" else 1
    n = len(text)
    budget.scanned(n - i)  # the most this search can look at
    while i < n:
        c = text[i]
        if c == "$" and text.startswith("{", i + 1):  # ${...} is a parameter
            level += 1
            i += 2
            continue
        if c in "$<>" and text.startswith("(", i + 1):  # $( ) <( ) >( ) pass through whole
            i = _skip_parens(text, i + 2)
            continue
        if c == satisfy and level == 0 and separators > 0:
            if c == "{" and (i == 0 or text[i - 1] in _BLANKS) and (i + 1 >= n or text[i + 1] in _BLANKS + "}"):
                i += 1  # "{ " and a word-initial "{}" open nothing
                continue
            return i
        if c == "{":
            level += 1
        elif c == "}" and level:
            level -= 1
        elif satisfy == "}" and level == 0 and (c == "," or (text.startswith("..", i) and text[i + 2 : i + 3] != "}")):
            separators += 1
        i += 1
    return -1


_BLANKS = " \t\n"


def _skip_parens(text: str, i: int) -> int:
    depth = 1
    while i < len(text) and depth:
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        i += 1
    return i


def _split_amble(amble: str, budget: _Budget) -> list[str]:
    """The alternatives: ``amble`` cut at the commas outside inner braces."""
    parts: list[str] = []
    start = 0
    while True:
        comma = _gobble(amble, start, ",", budget)
        if comma < 0:
            parts.append(amble[start:])
            return parts
        parts.append(amble[start:comma])
        start = comma + 1


_SEQUENCE = re.compile(r"^([+-]?\d+|[A-Za-z])\.\.([+-]?\d+|[A-Za-z])(?:\.\.([+-]?\d+))?$")


def _sequence(body: str) -> list[str] | None:
    """``1..5``, ``-1..-3``, ``a..e``, ``01..10..3``; None when ``body`` is not a sequence."""
    m = _SEQUENCE.match(body)
    if not m:
        return None
    first, last, step_text = m.groups()
    step = abs(int(step_text)) if step_text else 1
    step = step or 1
    numeric = first[-1].isdigit()
    if numeric != last[-1].isdigit():
        return None
    a, b = (int(first), int(last)) if numeric else (ord(first), ord(last))
    if abs(b - a) // step + 1 > MAX_WORDS:
        raise ParseError(f"brace expansion over {MAX_WORDS} words")
    values = range(a, b + (1 if b >= a else -1), step if b >= a else -step)
    if not numeric:
        return [chr(x) for x in values]
    width = max(
        (len(t) for t in (first, last) if t.lstrip("+-").startswith("0") and len(t.lstrip("+-")) > 1), default=0
    )
    return [f"{x:0{width}d}" if width else str(x) for x in values]
