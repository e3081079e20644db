"""Finding shell function definitions while the tokenizer reads a script.

``f() { rm -rf "$1"; }; f /`` runs ``rm -rf /``: the body must be examined with the
arguments of each call, so the classifier needs its source text. The tokenizer keeps
commands flat (a body's commands stay in the script where they are written, examined
there as well), and tells this scanner about the few tokens that delimit a body:

* ``(`` right after a word ``NAME`` (``function NAME``, ...), when ``)`` follows: a
  definition; its body is the next ``{ ... }`` group or ``( ... )`` subshell (anything
  else: unknown body);
* ``{`` and ``}`` where a command starts (``{`` also right after ``if``/``then``/``do``/...),
  while a body is open or about to start (the nesting only matters relative to a body),
  and ``function NAME {`` without parentheses;
* ``(`` and ``)`` of subshells, with the tokenizer's nesting count.

A body ends at the ``}`` or ``)`` that brings the nesting back to where it started. One
scanner serves one ``script()`` call; substitutions get their own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from runner.safety.shell.syntax import FunctionDef, Word

_NAME = re.compile(r"[^\s$`'\"\\=<>|&;(){}]+")
_CLOSE_PAREN = re.compile(r"[^\S\n]*\)")
_BODY_START = re.compile(r"\s*(?:\{(?=\s)|\()")
# Words after which a word is still in command position (so "{" opens a group).
_LEADING = frozenset({"!", "{", "if", "then", "else", "elif", "while", "until", "do", "time"})


@dataclass(slots=True)
class _Body:
    name: str
    start: int  # offset of the body's "{" or "("
    kind: str  # "{" or "("
    level: int  # the brace or parenthesis nesting inside the body


class FunctionScanner:
    """Collects the ``FunctionDef``\\ s of one script from the tokenizer's callbacks."""

    __slots__ = ("_braces", "_open", "_pending", "found", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.found: list[FunctionDef] = []
        self._pending: dict[int, str] = {}  # offset where a body must start -> function name
        self._open: list[_Body] = []
        self._braces = 0  # "{" groups open at command position since the scanner watched

    @property
    def watching(self) -> bool:
        """A body is open or about to start: ``{`` and ``}`` must be counted."""
        return bool(self._open or self._pending)

    def header(self, words: list[Word], pos: int) -> int:
        """At ``(`` (``pos`` just after it) following ``words``: when this is ``NAME ()`` or
        ``function NAME ()``, note the definition and return the offset after ``)``; else -1."""
        name = _header_name(words)
        if name is None:
            return -1
        m = _CLOSE_PAREN.match(self.text, pos)
        if m is None:
            return -1
        body = _BODY_START.match(self.text, m.end())
        if body is None:
            self.found.append(FunctionDef(name, None))
        else:
            self._pending[body.end() - 1] = name
        return m.end()

    def brace(self, value: str, words: list[Word], start: int, end: int) -> None:
        """An unquoted ``{`` or ``}`` word from ``start`` to ``end``; ``words`` precede it."""
        if value == "{":
            name = self._pending.pop(start, None) or _keyword_name(words)
            if name is not None or not words or words[-1].value in _LEADING:  # O(1): hostile "{ { { ..."
                self._braces += 1
            if name is not None:
                self._open.append(_Body(name, start, "{", self._braces))
        elif not words:
            if self._open and self._open[-1].kind == "{" and self._open[-1].level == self._braces:
                self._close(end)
            self._braces = max(self._braces - 1, 0)

    def paren_opened(self, parens: int, start: int) -> None:
        """A subshell ``(`` at ``start``; ``parens`` is the nesting including it."""
        name = self._pending.pop(start, None)
        if name is not None:
            self._open.append(_Body(name, start, "(", parens))

    def paren_closed(self, parens: int, end: int) -> None:
        """A ``)`` ending at ``end``; ``parens`` is the nesting left after it."""
        if self._open and self._open[-1].kind == "(" and self._open[-1].level == parens + 1:
            self._close(end)

    def finish(self) -> tuple[FunctionDef, ...]:
        """The definitions found; a body never closed (or never started) is unknown."""
        unclosed = [FunctionDef(b.name, None) for b in self._open]
        unstarted = [FunctionDef(name, None) for name in self._pending.values()]
        return (*self.found, *unclosed, *unstarted)

    def _close(self, end: int) -> None:
        body = self._open.pop()
        self.found.append(FunctionDef(body.name, self.text[body.start : end]))


def _header_name(words: list[Word]) -> str | None:
    """The name before ``()``: ``NAME``, ``function NAME``, ``then NAME``. Words before it
    that bash would reject (``sudo f() { ...; }`` is a syntax error) are ignored: reading
    a definition where there is none can only make more text count as a command."""
    return _plain_name(words[-1])


def _keyword_name(words: list[Word]) -> str | None:
    """``function NAME`` (at the end of ``words``): the name, else None."""
    if len(words) < 2 or words[-2].value != "function" or words[-2].quoted:
        return None
    return _plain_name(words[-1])


def _plain_name(word: Word) -> str | None:
    if word.quoted or word.subs or not _NAME.fullmatch(word.value):
        return None
    return word.value
