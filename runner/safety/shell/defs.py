"""Aliases and shell functions defined in one command line, and the text a use of one runs.

``alias x='rm -rf'; x /`` and ``f() { rm -rf "$1"; }; f /`` both run ``rm -rf /``. A use
of a name runs its body: an alias's value followed by the use's arguments, a function's
body with ``$1``, ``$@``, ... set to them. bash expands an alias only on a later line (and
only with ``expand_aliases``) and knows a function only once its definition ran; the
classifier ignores both limits, since it may only ever flag more: a use anywhere in the
command line, before or after a definition, is examined with every body the name got.

Pure bookkeeping: ``Definitions`` says which texts to examine; the classifier examines them
(and guards against a body that uses its own name); ``called`` says what a use does with its
standard streams (``f() { sh; }; echo ... | f`` feeds ``sh``).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, replace
from typing import Literal

from runner.safety.shell.common import NO_TRAITS, Traits
from runner.safety.shell.syntax import ParseError
from runner.safety.shell.unwrap import with_positionals

Kind = Literal["alias", "function"]


@dataclass(frozen=True, slots=True)
class Use:
    """A command whose name may be an alias or a function: its arguments, and the working
    directory and top-level pipeline it was met in."""

    args: tuple[str, ...]
    cwd: str | None
    top: str


@dataclass(frozen=True, slots=True)
class Expansion:
    """What one use of ``name`` runs with one of its bodies; ``text`` is None for a function
    body the parser could not delimit."""

    name: str
    text: str | None
    use: Use


MAX_EXPANSIONS = 1024  # (use, body) pairs examined per classification; beyond: fail closed

_Met = tuple[tuple[str, ...], str | None, str]  # a command's argv, working directory, top-level pipeline


class Definitions:
    """The bodies given to each name, and every command met so far (a use is made of one
    only when its name has a body). Commands met before the first definition are kept in a
    list (the common case: no definition at all costs one append per command), afterwards
    by name. More than ``MAX_EXPANSIONS`` pairs raise ``ParseError``: the classification
    fails closed instead of pairing thousands of uses with thousands of bodies."""

    __slots__ = ("_bodies", "_by_name", "_left", "_met")

    def __init__(self) -> None:
        self._bodies: dict[str, dict[tuple[Kind, str | None], None]] = {}
        self._met: list[_Met] = []
        self._by_name: dict[str, list[_Met]] | None = None
        self._left = MAX_EXPANSIONS

    def define(self, name: str, kind: Kind, body: str | None) -> list[Expansion]:
        """Give ``name`` a body; returns what the commands met before now run with it."""
        bodies = self._bodies.setdefault(name, {})
        if (kind, body) in bodies:
            return []
        bodies[(kind, body)] = None
        earlier = self._index().get(name, ())
        self._spend(len(earlier))
        return [expansion(name, kind, body, Use(argv[1:], cwd, top)) for argv, cwd, top in earlier]

    def use(self, argv: tuple[str, ...], cwd: str | None, top: str) -> list[Expansion]:
        """Note a command; returns what it runs with each body its name was given so far."""
        if self._by_name is None:
            self._met.append((argv, cwd, top))
            return []
        self._by_name.setdefault(argv[0], []).append((argv, cwd, top))
        bodies = self._bodies.get(argv[0])
        if not bodies:
            return []
        self._spend(len(bodies))
        use = Use(argv[1:], cwd, top)
        return [expansion(argv[0], kind, body, use) for kind, body in bodies]

    def _index(self) -> dict[str, list[_Met]]:
        if self._by_name is None:
            self._by_name = {}
            for met in self._met:
                self._by_name.setdefault(met[0][0], []).append(met)
            self._met = []
        return self._by_name

    def _spend(self, pairs: int) -> None:
        self._left -= pairs
        if self._left < 0:
            raise ParseError(f"more than {MAX_EXPANSIONS} uses of aliases and functions to examine")


def expansion(name: str, kind: Kind, body: str | None, use: Use) -> Expansion:
    """The shell text a use runs: ``VALUE ARGS...`` for an alias, the body with its
    positional parameters set for a function."""
    if body is None:
        return Expansion(name, None, use)
    if kind == "alias":
        text = " ".join([body, *map(shlex.quote, use.args)]) if use.args else body
    else:
        text = with_positionals(body, (name, *use.args))
    return Expansion(name, text, use)


# ---------------------------------------------------------------- definitions that are assignments

_ELEMENT = re.compile(r"^BASH_ALIASES\[([^\]]*)\]\+?=(.*)$", re.S)
_ARRAY_ITEM = re.compile(r"\[([^\]]+)\]=(\"(?:[^\"\\]|\\.)*\"|'[^']*'|[^\s)]+)")
_EXPORTED = re.compile(r"^BASH_FUNC_(.+?)(?:%%|\(\))=\(\)\s*(.*)$", re.S)


def assigned_definitions(word: str) -> list[tuple[str, Kind, str]]:
    """Aliases and functions an assignment word defines: ``BASH_ALIASES[x]=VALUE``,
    ``BASH_ALIASES=([x]=VALUE ...)`` (also after ``declare -A``), and a function exported
    in the environment (``env 'BASH_FUNC_f%%=() { ...; }' bash -c f``)."""
    if not word.startswith("BASH_"):
        return []
    m = _ELEMENT.match(word)
    if m:
        return [(m.group(1), "alias", m.group(2))]
    m = _EXPORTED.match(word)
    if m:
        return [(m.group(1), "function", m.group(2))]
    name, _, value = word.partition("=")
    if name.rstrip("+") == "BASH_ALIASES" and value.startswith("("):
        return [(key, "alias", _unquoted(item)) for key, item in _ARRAY_ITEM.findall(value)]
    return []


def _unquoted(item: str) -> str:
    try:
        words = shlex.split(item)
    except ValueError:
        return item
    return words[0] if len(words) == 1 else item


# ---------------------------------------------------------------- what a use does with its streams


def body_traits(reader: Traits | None, output: str | None) -> Traits:
    """A body's streams: the first of its commands that executes its stdin, its known output."""
    if reader is None:
        return Traits(stdout_text=output) if output is not None else NO_TRAITS
    return Traits(stdin_exec=reader.stdin_exec, xargs=reader.xargs, sql=reader.sql, stdout_text=output)


def called(traits: Traits, bodies: list[Traits]) -> Traits:
    """A command that is also a use: the command as written (an alias is not active on its
    own line) and what its bodies do: any may read stdin; the output is known for one body."""
    stdout = traits.stdout_text
    if stdout is None and len(bodies) == 1:
        stdout = bodies[0].stdout_text
    return replace(
        traits,
        stdin_exec=traits.stdin_exec or next((b.stdin_exec for b in bodies if b.stdin_exec), None),
        xargs=traits.xargs or next((b.xargs for b in bodies if b.xargs is not None), None),
        sql=traits.sql or any(b.sql for b in bodies),
        stdout_text=stdout,
    )
