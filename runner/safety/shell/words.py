"""Reading one shell word: quotes, escapes, ``$`` expansions and substitutions.

Separate from ``split.py`` (which knows about commands, operators, redirections and
here-documents) so each half stays readable. ``WordReader`` is the base of the parser;
it calls back into ``script()`` for ``$( ... )`` bodies.

Value rules, chosen so one spelling of a command has one value:
``r''m``, ``r\\m`` and ``"r"m`` are ``rm``; ``$'\\x72m'`` is decoded; an unquoted ``$IFS``
or ``${IFS}`` ends the word (word splitting), inside double quotes it is a space;
``$@`` / ``$*`` are empty; other ``$NAME`` / ``${...}`` references stay literal.
"""

from __future__ import annotations

import re

from runner.safety.shell.normalize import decode_ansi_c
from runner.safety.shell.syntax import MAX_DEPTH, SUBSTITUTION_COST, ParseBudget, ParseError, Script, Sub, Word

_PLAIN = re.compile(r"[^\s'\"\\$`<>|&;()]+")
_DQ_PLAIN = re.compile(r'[^"\\$`]+')
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PARAM_SPECIAL = re.compile(r"[\\'\"$`{}]")
_PAREN = re.compile(r"[()]")
_IFS = object()  # _dollar result: an unquoted $IFS, which splits the word
_QUOTED = object()  # _dollar result: a $'...' or $"..." string was read


class WordReader:
    """Position-based reader over ``text``; subclasses provide ``script()``."""

    def __init__(self, text: str, budget: ParseBudget, depth: int) -> None:
        self.text = text
        self.n = len(text)
        self.pos = 0
        self.budget = budget
        self.depth = depth

    def script(self, end: str | None) -> Script:
        raise NotImplementedError

    # ----------------------------------------------------------------- words

    def word(self) -> Word | None:
        """Read one word. Returns None when the word was only an ``$IFS`` separator."""
        text, n = self.text, self.n
        parts: list[str] = []
        subs: list[Sub] = []
        quoted = braces = False
        while self.pos < n:
            m = _PLAIN.match(text, self.pos)
            if m:
                part = m.group()
                parts.append(part)
                braces = braces or "{" in part
                self.pos = m.end()
                continue
            c = text[self.pos]
            if c == "\\":
                parts.append(text[self.pos + 1 : self.pos + 2])
                quoted = True
                self.pos += 2
            elif c == "'":
                close = text.find("'", self.pos + 1)
                if close < 0:
                    raise ParseError("unterminated single quote")
                parts.append(text[self.pos + 1 : close])
                quoted = True
                self.pos = close + 1
            elif c == '"':
                self.pos += 1
                self.dquote(parts, subs, closing=True)
                quoted = True
            elif c == "$":
                kind = self._dollar(parts, subs, in_dquote=False)
                if kind is _IFS:
                    if parts or quoted:
                        break
                    continue
                quoted = quoted or kind is _QUOTED
            elif c == "`":
                self._backtick(parts, subs, in_dquote=False)
            else:
                break
        if not parts and not quoted and not subs:
            if self.pos < n and text[self.pos] not in " \t\n;&|()<>":
                raise ParseError("unexpected character")
            return None
        return Word("".join(parts), quoted, tuple(subs), braces)

    def dquote(self, parts: list[str], subs: list[Sub], closing: bool) -> None:
        """Read a double-quoted string body (or a whole here-document when not ``closing``)."""
        text, n = self.text, self.n
        while self.pos < n:
            m = _DQ_PLAIN.match(text, self.pos)
            if m:
                parts.append(m.group())
                self.pos = m.end()
                continue
            c = text[self.pos]
            if c == '"':
                if closing:
                    self.pos += 1
                    return
                parts.append(c)
                self.pos += 1
            elif c == "\\":
                nxt = text[self.pos + 1 : self.pos + 2]
                parts.append(nxt if nxt in '$`"\\' else "\\" + nxt)
                self.pos += 2
            elif c == "$":
                if self._dollar(parts, subs, in_dquote=True) is _IFS:
                    parts.append(" ")
            else:  # backtick
                self._backtick(parts, subs, in_dquote=True)
        if closing:
            raise ParseError("unterminated double quote")

    # ----------------------------------------------------------------- $ forms

    def _dollar(self, parts: list[str], subs: list[Sub], in_dquote: bool) -> object:
        text, start = self.text, self.pos
        nxt = text[start + 1 : start + 2]
        if nxt == "(":
            if text.startswith("$((", start):
                self._arith(parts, subs)
            else:
                self.pos = start + 2
                sub_script = self.nested(end=")")
                raw = text[start : self.pos]
                subs.append(Sub("cmd", sub_script, raw))
                parts.append(raw)
            return None
        if nxt == "{":
            return self._param(parts, subs, in_dquote)
        if nxt == "'" and not in_dquote:
            close = _closing(text, "'", start + 2)
            if close < 0:
                raise ParseError("unterminated $'...' string")
            parts.append(decode_ansi_c(text[start + 2 : close]))
            self.pos = close + 1
            return _QUOTED
        if nxt == '"' and not in_dquote:
            self.pos = start + 2
            self.dquote(parts, subs, closing=True)
            return _QUOTED
        m = _NAME.match(text, start + 1)
        if m:
            self.pos = m.end()
            if m.group() == "IFS":
                return _IFS
            parts.append("$" + m.group())
            return None
        if nxt in ("@", "*"):
            self.pos = start + 2  # empty outside a function: a classic splice trick
            return None
        if nxt and nxt in "#?$!-0123456789":
            parts.append("$" + nxt)
            self.pos = start + 2
            return None
        parts.append("$")
        self.pos = start + 1
        return None

    def _param(self, parts: list[str], subs: list[Sub], in_dquote: bool) -> object:
        """``${...}``: keep it literal, but parse substitutions nested inside it."""
        text, start = self.text, self.pos
        self.pos = start + 2
        depth = 1
        while depth:
            m = _PARAM_SPECIAL.search(text, self.pos)
            if m is None:
                raise ParseError("unterminated ${")
            self.pos = m.start()
            c = m.group()
            if c == "\\":
                self.pos += 2
            elif c == "'" and not in_dquote:
                close = text.find("'", self.pos + 1)
                if close < 0:
                    raise ParseError("unterminated single quote")
                self.pos = close + 1
            elif c == '"':
                self.pos += 1
                self.dquote([], subs, closing=True)
            elif c == "$":
                if text.startswith("${", self.pos):
                    self.pos += 2
                    depth += 1
                else:
                    self._dollar([], subs, in_dquote=True)
            elif c == "`":
                self._backtick([], subs, in_dquote)
            else:
                self.pos += 1
                depth += 1 if c == "{" else -1
        inner = text[start + 2 : self.pos - 1]
        if inner.startswith("IFS") and not (inner[3:4].isalnum() or inner[3:4] == "_"):
            return _IFS
        if inner in ("@", "*"):
            return None
        parts.append(text[start : self.pos])
        return None

    def _arith(self, parts: list[str], subs: list[Sub]) -> None:
        """``$(( ... ))``: arithmetic is not a command, but substitutions inside it run."""
        start = self.pos
        end = self._matching_parens(start + 3, depth=2)
        raw = self.text[start:end]
        self.pos = end
        subs.extend(self.subs_in(raw[3:-2]))
        parts.append(raw)

    def arith_command(self) -> Word:
        """``(( ... ))`` at command position; kept as one opaque, quoted word."""
        start = self.pos
        end = self._matching_parens(start + 2, depth=2)
        self.pos = end
        raw = self.text[start:end]
        return Word(raw, True, self.subs_in(raw[2:-2]))

    def array_literal(self, word: Word) -> Word:
        """``name=( a b c )`` is an array assignment, not a subshell."""
        start = self.pos
        end = self._matching_parens(start + 1, depth=1)
        self.pos = end
        raw = self.text[start:end]
        return Word(word.value + raw, True, word.subs + self.subs_in(raw))

    def _matching_parens(self, pos: int, depth: int) -> int:
        text = self.text
        while depth:
            m = _PAREN.search(text, pos)
            if m is None:
                raise ParseError("unterminated parentheses")
            depth += 1 if m.group() == "(" else -1
            pos = m.end()
        return pos

    # ----------------------------------------------------------------- substitutions

    def _backtick(self, parts: list[str], subs: list[Sub], in_dquote: bool) -> None:
        text, start = self.text, self.pos
        close = _closing(text, "`", start + 1)
        if close < 0:
            raise ParseError("unterminated backtick")
        raw = text[start : close + 1]
        body = _unescape_backtick(text[start + 1 : close], in_dquote)
        self._check_depth()
        self.budget.spend(len(body) + SUBSTITUTION_COST)
        inner = type(self)(body, self.budget, self.depth + 1)
        subs.append(Sub("cmd", inner.script(end=None), raw))
        parts.append(raw)
        self.pos = close + 1

    def process_sub(self) -> Word:
        start = self.pos
        self.pos += 2
        sub_script = self.nested(end=")")
        raw = self.text[start : self.pos]
        return Word(raw, False, (Sub("proc", sub_script, raw),))

    def nested(self, end: str) -> Script:
        self._check_depth()
        self.budget.spend(SUBSTITUTION_COST)
        self.depth += 1
        try:
            return self.script(end=end)
        finally:
            self.depth -= 1

    def subs_in(self, body: str) -> tuple[Sub, ...]:
        """Substitutions inside text that expands like a double-quoted string."""
        if "$" not in body and "`" not in body:
            return ()
        self._check_depth()
        self.budget.spend(len(body) + SUBSTITUTION_COST)
        inner = type(self)(body, self.budget, self.depth + 1)
        subs: list[Sub] = []
        inner.dquote([], subs, closing=False)
        return tuple(subs)

    def _check_depth(self) -> None:
        if self.depth + 1 > MAX_DEPTH:
            raise ParseError("nesting too deep")


def _closing(text: str, quote: str, pos: int) -> int:
    """Index of the next ``quote`` not escaped by an odd run of backslashes, or -1."""
    while True:
        pos = text.find(quote, pos)
        if pos < 0:
            return -1
        run = 0
        while pos - run - 1 >= 0 and text[pos - run - 1] == "\\":
            run += 1
        if run % 2 == 0:
            return pos
        pos += 1


def _unescape_backtick(body: str, in_dquote: bool) -> str:
    """Inside backticks a backslash only escapes ``$``, backtick and backslash (and ``"``
    when the backticks are themselves in double quotes)."""
    if "\\" not in body:
        return body
    specials = '$`\\"' if in_dquote else "$`\\"
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body) and body[i + 1] in specials:
            out.append(body[i + 1])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)
