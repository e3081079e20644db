"""The tree the tokenizer produces: scripts of pipelines of simple commands, whose words
may carry command substitutions (themselves scripts), and the functions a script defines.
Plus the parse limits.

``render`` turns a simple command back into one canonical line: that text is what the
verdict lists as a segment, and what ``allow:`` patterns are matched against.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_DEPTH = 24  # nested substitutions / payloads before we give up (fail closed)


class ParseError(ValueError):
    """The text is not something we can safely reason about."""


MAX_COMMANDS = 5000  # simple commands parsed in total, payload re-parses included
MAX_WORDS = 20000  # words parsed in total
SUBSTITUTION_COST = 64  # characters charged per substitution, so empty ones are not free


class ParseBudget:
    """Caps the work of one classification, so hostile input fails closed quickly.

    Payloads are re-parsed (``bash -c``, ``eval``), so characters are counted across all
    recursion; commands and words are counted as the parser creates them, which stops a
    separator-heavy input long before it is fully tokenised."""

    __slots__ = ("chars", "commands", "words")

    def __init__(self, chars: int, commands: int = MAX_COMMANDS, words: int = MAX_WORDS) -> None:
        self.chars = chars
        self.commands = commands
        self.words = words

    def spend(self, n: int) -> None:
        self.chars -= n
        if self.chars < 0:
            raise ParseError("too much nested input")

    def command(self, words: int) -> None:
        self.commands -= 1
        self.words -= words
        if self.commands < 0:
            raise ParseError(f"more than {MAX_COMMANDS} commands")
        if self.words < 0:
            raise ParseError(f"more than {MAX_WORDS} words")


@dataclass(frozen=True, slots=True)
class Sub:
    """A command or process substitution found inside a word."""

    kind: str  # "cmd" for $( ) and backticks, "proc" for <( ) and >( )
    script: Script
    raw: str  # the source text, e.g. "$(curl x)"; it stays in the word's value


@dataclass(frozen=True, slots=True)
class Word:
    value: str  # quotes and escapes removed
    quoted: bool = False  # any part was quoted or escaped: no splitting
    subs: tuple[Sub, ...] = ()
    braces: bool = False  # an unquoted part holds "{": brace expansion applies even if quoted


@dataclass(slots=True)
class Redirect:
    """One redirection. Not frozen: a here-document body arrives after the line ends."""

    fd: str
    op: str
    target: Word  # for a here-document, the delimiter
    body: str | None = None
    body_subs: tuple[Sub, ...] = ()


@dataclass(frozen=True, slots=True)
class Command:
    words: tuple[Word, ...]
    redirects: tuple[Redirect, ...] = ()


@dataclass(frozen=True, slots=True)
class Pipeline:
    commands: tuple[Command, ...]


@dataclass(frozen=True, slots=True)
class FunctionDef:
    """``NAME () BODY`` or ``function NAME [()] BODY``. Its commands stay in the script's
    pipelines where they were written; this names the body's source text (``{ ...; }`` or
    ``( ... )``) so a call can be examined with its arguments, or None when the body is a
    compound command the parser does not delimit (``f() if ...; fi``)."""

    name: str
    body: str | None


@dataclass(frozen=True, slots=True)
class Script:
    pipelines: tuple[Pipeline, ...]
    skeleton: str  # operators and unquoted words only: structure without quoted text
    functions: tuple[FunctionDef, ...] = ()  # functions defined in this script (not in substitutions)


_SAFE_WORD = re.compile(r"[\w@%+=:,./~*?^!#{}\[\]-]+")


def render(cmd: Command) -> str:
    """The normalised text of one simple command: words re-quoted only where needed."""
    parts = [_quote(w.value) for w in cmd.words]
    for r in cmd.redirects:
        if r.op in (">&", "<&"):
            parts.append(f"{r.fd}{r.op}{r.target.value}")
        else:
            parts.append(f"{r.fd}{r.op} {_quote(r.target.value)}")
    return " ".join(parts)


def _quote(value: str) -> str:
    if _SAFE_WORD.fullmatch(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
