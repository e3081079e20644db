"""Regular expressions compiled on first use, not at import.

A module-level ``NAME = LazyPattern(r"...")`` costs nothing until the first ``NAME.search(...)``
(or another method): then the pattern is compiled once and the compiled pattern's own bound
methods are stored on the instance, so every later call goes straight to them (an instance
attribute wins over the class's method). About 230 patterns used to be compiled at import by a
`runner run-job` that called no tool, most of them the shell classifier's; see README.md
"Start-up time". Only ``str`` patterns; the flags are those of ``re.compile``.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator, Mapping
from functools import cached_property
from typing import Any

_METHODS = ("search", "match", "fullmatch", "finditer", "findall", "sub", "subn", "split")


class LazyPattern:
    """``re.compile(pattern, flags)``, done at the first method call."""

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern = pattern
        self._flags = flags

    @property
    def compiled(self) -> re.Pattern[str]:
        """The compiled pattern (compiling it now if no method was called yet)."""
        compiled: re.Pattern[str] | None = self.__dict__.get("_compiled")
        if compiled is None:
            compiled = self.__dict__["_compiled"] = re.compile(self.pattern, self._flags)
            for name in _METHODS:  # later calls skip this class: the instance attribute is found first
                setattr(self, name, getattr(compiled, name))
        return compiled

    @cached_property
    def flags(self) -> int:
        return self.compiled.flags

    @cached_property
    def groupindex(self) -> Mapping[str, int]:
        return self.compiled.groupindex

    def search(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        return self.compiled.search(string, pos, endpos)

    def match(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        return self.compiled.match(string, pos, endpos)

    def fullmatch(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        return self.compiled.fullmatch(string, pos, endpos)

    def finditer(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> Iterator[re.Match[str]]:
        return self.compiled.finditer(string, pos, endpos)

    def findall(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> list[Any]:
        return self.compiled.findall(string, pos, endpos)

    def sub(self, repl: str | Callable[[re.Match[str]], str], string: str, count: int = 0) -> str:
        return self.compiled.sub(repl, string, count)

    def subn(self, repl: str | Callable[[re.Match[str]], str], string: str, count: int = 0) -> tuple[str, int]:
        return self.compiled.subn(repl, string, count)

    def split(self, string: str, maxsplit: int = 0) -> list[str | Any]:
        return self.compiled.split(string, maxsplit)

    def __repr__(self) -> str:
        return f"LazyPattern({self.pattern!r})"
