"""A notebook: the bounded list of entries one memory scope holds, and the edits the model may make.

Pure functions over frozen values, no I/O: ``add``, ``replace`` and ``remove`` return the new
``Notebook`` or raise ``MemoryRefused`` with the one line the model (or the person editing) reads.
Entries are joined by ``DELIMITER`` (a line holding only ``§``), which is also the format of
``runner memory edit``; the cap counts the characters of that joined text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

DELIMITER = "\n§\n"
MARK = "§"  # a line holding only this separates entries; an entry may not contain such a line
CAP_CHARS = 1_800  # per notebook: a full one plus the tool's schema stays under 2.5 KB of a request
SCOPE_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")  # matched whole (fullmatch: no trailing newline)


class ScopeKind(StrEnum):
    JOB = "job"
    SHARED = "shared"


class Action(StrEnum):
    ADD = "add"
    REPLACE = "replace"
    REMOVE = "remove"


class MemoryRefused(ValueError):
    """A write the notebook does not take (over the cap, no match, an injection): nothing is stored."""


@dataclass(frozen=True)
class Scope:
    """Which notebook: a job's own (``job:NAME``) or a named shared one (``shared:NAME``)."""

    kind: ScopeKind
    name: str

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.name}"

    def __str__(self) -> str:
        return self.key


def job_scope(setting: str, job: str) -> Scope | None:
    """The scope a job's ``memory:`` setting names (``job``, ``shared:NAME``, ``off``); None for off."""
    if setting == "off":
        return None
    if setting == "job":
        return Scope(ScopeKind.JOB, job)
    return parse_scope(setting, bare=ScopeKind.SHARED)


def parse_scope(text: str, *, bare: ScopeKind = ScopeKind.JOB) -> Scope:
    """``shared:NAME``, ``job:NAME`` or a bare NAME (of kind ``bare``); ValueError names the problem."""
    kind, sep, name = text.partition(":")
    if not sep:
        kind, name = bare.value, text
    if kind not in (ScopeKind.JOB, ScopeKind.SHARED):
        raise ValueError(f"{text!r}: expected a job name or shared:NAME")
    if not SCOPE_NAME.fullmatch(name):
        raise ValueError(f"{text!r}: the name must match ^[a-z0-9][a-z0-9_-]{{0,63}}$")
    return Scope(ScopeKind(kind), name)


def parse(text: str) -> tuple[str, ...]:
    """Entries of ``text`` in the notebook format: split at lines holding only ``§``, each entry
    stripped of surrounding blank space, empty ones dropped, duplicates kept once."""
    entries: list[str] = []
    current: list[str] = []
    for line in text.replace("\r\n", "\n").split("\n"):
        if line.strip() == MARK:
            entries.append("\n".join(current))
            current = []
        else:
            current.append(line)
    entries.append("\n".join(current))
    return tuple(dict.fromkeys(e.strip() for e in entries if e.strip()))


def render(entries: tuple[str, ...]) -> str:
    return DELIMITER.join(entries)


def check_entry(content: str) -> str:
    """The entry as stored (stripped); MemoryRefused when it is empty or holds a ``§`` line."""
    entry = content.strip()
    if not entry:
        raise MemoryRefused("content is empty; nothing was stored")
    if any(line.strip() == MARK for line in entry.split("\n")):
        raise MemoryRefused(
            f"content may not hold a line with only {MARK!r} (it separates entries); nothing was stored"
        )
    return entry


@dataclass(frozen=True)
class Notebook:
    entries: tuple[str, ...] = ()
    cap: int = CAP_CHARS

    @property
    def chars(self) -> int:
        return len(render(self.entries))

    def usage(self) -> str:
        """``3 entries, 812/1,800 chars (45%)``."""
        pct = round(100 * self.chars / self.cap) if self.cap else 100
        n = len(self.entries)
        return f"{n} {'entry' if n == 1 else 'entries'}, {self.chars:,}/{self.cap:,} chars ({pct}%)"

    def within_cap(self, before: Notebook | None = None) -> Notebook:
        if self.chars <= self.cap:
            return self
        now = f"; it holds {before.usage()}" if before is not None else ""
        raise MemoryRefused(
            f"notebook full: this would make {self.chars:,}/{self.cap:,} chars{now}. Nothing was stored; "
            "consolidate first: replace entries with shorter ones or remove what is no longer needed"
        )

    def add(self, content: str) -> Notebook:
        entry = check_entry(content)
        if entry in self.entries:
            return self
        return Notebook((*self.entries, entry), self.cap).within_cap(self)

    def replace(self, old_text: str, content: str) -> Notebook:
        entry = check_entry(content)
        entries = list(self.entries)
        entries[self.find(old_text)] = entry
        return Notebook(tuple(dict.fromkeys(entries)), self.cap).within_cap(self)

    def remove(self, old_text: str) -> Notebook:
        i = self.find(old_text)
        return Notebook(self.entries[:i] + self.entries[i + 1 :], self.cap)

    def find(self, old_text: str) -> int:
        """The index of the one entry that contains ``old_text``; MemoryRefused when none or several do."""
        needle = old_text.strip()
        if not needle:
            raise MemoryRefused("old_text is empty: give a short piece of the entry to change")
        hits = [i for i, e in enumerate(self.entries) if needle in e]
        if not hits:
            raise MemoryRefused(f"no entry contains {_short(needle)}; nothing was changed")
        if len(hits) > 1:
            raise MemoryRefused(
                f"{len(hits)} entries contain {_short(needle)}; give a longer piece of the one to change"
            )
        return hits[0]


def _short(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")
