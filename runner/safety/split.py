"""A small, linear-time shell tokenizer that splits a command line into simple commands.

Why hand-written: bashlex needs hundreds of microseconds for a one-line command, raises on
plenty of real-world syntax, and recurses deeply on adversarial input; the classifier must
stay under ~50 µs per command and fail *closed*, never slow. This module understands just
enough of bash to find every place a command can start:

* separators ``;  &&  ||  |  |&  &`` and newlines, subshell and group parentheses;
* quoting: single and double quotes, backslash escapes, ``$'...'`` (decoded), ``$"..."``;
* command substitution ``$( )`` and backticks, process substitution ``<( ) >( )``, also
  inside double quotes and in unquoted here-document bodies, each parsed recursively;
* redirections with their targets, and here-documents, whose bodies are kept as data;
* ``$IFS`` / ``${IFS}`` act as word separators; ``$@`` / ``$*`` as empty strings.

Word values have quotes and escapes removed (``r''m`` and ``r\\m`` both give ``rm``);
variable references other than the ones above stay literal (``$HOME``) for the rules.
Anything it cannot make sense of raises ``ParseError``, which the classifier treats as
dangerous.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from runner.safety.normalize import decode_ansi_c

MAX_DEPTH = 24  # nested substitutions / payloads before we give up (fail closed)


class ParseError(ValueError):
    """The text is not something we can safely reason about."""


@dataclass(frozen=True, slots=True)
class Sub:
    """A command or process substitution found inside a word."""

    kind: str  # "cmd" for $( ) and backticks, "proc" for <( ) and >( )
    script: Script
    raw: str


@dataclass(frozen=True, slots=True)
class Word:
    value: str
    quoted: bool = False
    subs: tuple[Sub, ...] = ()


@dataclass(slots=True)
class Redirect:
    """One redirection. Not frozen: a here-document body arrives after the line ends."""

    fd: str
    op: str
    target: Word
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
class Script:
    pipelines: tuple[Pipeline, ...]
    skeleton: str  # operators and unquoted words only: structure without quoted text


class Budget:
    """Caps the total characters parsed across all recursion (payloads re-parse text)."""

    __slots__ = ("left",)

    def __init__(self, chars: int) -> None:
        self.left = chars

    def spend(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise ParseError("too much nested input")


_PLAIN = re.compile(r"[^\s'\"\\$`<>|&;()]+")
_BLANKS = re.compile(r"[^\S\n]+")  # bash only splits on space/tab; treating other blanks
# as separators can only make more text look like commands, never less
_DQ_PLAIN = re.compile(r'[^"\\$`]+')
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_REDIRECT = re.compile(r"(\d+|\{[A-Za-z_]\w*\})?(&>>|&>|<<<|<<-|<<|<>|<&|>&|>>|>\||<|>)")
_OPERATOR = re.compile(r";;&|;;|;&|\|\||&&|\|&|[;&|()]")
_PARAM_SPECIAL = re.compile(r"[\\'\"$`{}]")
_IFS = object()  # _dollar result: an unquoted $IFS, which splits the word
_QUOTED = object()  # _dollar result: a $'...' or $"..." string was read


def parse(text: str, budget: Budget, depth: int = 0) -> Script:
    """Parse ``text`` into pipelines of simple commands (see the module docstring)."""
    if depth > MAX_DEPTH:
        raise ParseError("nesting too deep")
    budget.spend(len(text))
    return _Parser(text, budget, depth).script(end=None)


class _Parser:
    def __init__(self, text: str, budget: Budget, depth: int) -> None:
        self.text = text
        self.n = len(text)
        self.pos = 0
        self.budget = budget
        self.depth = depth

    # ----------------------------------------------------------------- structure

    def script(self, end: str | None) -> Script:
        """Parse commands until end of text, or until the ``)`` closing a substitution."""
        text, n = self.text, self.n
        pipelines: list[Pipeline] = []
        commands: list[Command] = []
        words: list[Word] = []
        redirects: list[Redirect] = []
        pending: list[tuple[Redirect, bool, str]] = []
        skel: list[str] = []

        def end_command() -> None:
            if words or redirects:
                commands.append(Command(tuple(words), tuple(redirects)))
                words.clear()
                redirects.clear()

        def end_pipeline() -> None:
            end_command()
            if commands:
                pipelines.append(Pipeline(tuple(commands)))
                commands.clear()

        while True:
            m = _BLANKS.match(text, self.pos)
            if m:
                self.pos = m.end()
            if self.pos >= n:
                if end is not None:
                    raise ParseError("unterminated substitution")
                break
            c = text[self.pos]
            if c == "\n":
                end_pipeline()
                skel.append(";")
                self.pos += 1
                if pending:
                    self._heredoc_bodies(pending)
                continue
            if c == "#":
                nl = text.find("\n", self.pos)
                self.pos = n if nl < 0 else nl
                continue
            if c == ")" and end == ")":
                self.pos += 1
                break
            if c in "<>" and text.startswith("(", self.pos + 1):
                words.append(self._process_sub())
                skel.append("P")
                continue
            m = _REDIRECT.match(text, self.pos)
            if m:
                self.pos = m.end()
                self._redirect(m.group(1) or "", m.group(2), redirects, pending)
                skel.append(m.group(2))
                continue
            m = _OPERATOR.match(text, self.pos)
            if m:
                op = m.group()
                if op == "(" and not words and text.startswith("((", self.pos):
                    words.append(self._arith_command())
                    skel.append("A")
                    continue
                self.pos = m.end()
                skel.append(op)
                if op in ("|", "|&"):
                    end_command()
                else:
                    end_pipeline()
                continue
            word = self._word()
            if word is None:  # $IFS alone: just a separator
                continue
            if not word.quoted and word.value.endswith("=") and text.startswith("(", self.pos):
                word = self._array_literal(word)
            words.append(word)
            skel.append("Q" if word.quoted else word.value)
        end_pipeline()
        if pending:  # here-document never terminated: bash reads to EOF, so do we
            self._heredoc_bodies(pending)
        return Script(tuple(pipelines), " ".join(skel))

    def _redirect(
        self, fd: str, op: str, redirects: list[Redirect], pending: list[tuple[Redirect, bool, str]]
    ) -> None:
        m = _BLANKS.match(self.text, self.pos)
        if m:
            self.pos = m.end()
        if self.text.startswith(("<(", ">("), self.pos):
            target = self._process_sub()
        else:
            word = self._word()
            if word is None or (not word.value and not word.quoted):
                raise ParseError(f"redirection {op} without a target")
            target = word
        redirect = Redirect(fd, op, target)
        redirects.append(redirect)
        if op in ("<<", "<<-"):
            pending.append((redirect, op == "<<-", target.value))

    def _heredoc_bodies(self, pending: list[tuple[Redirect, bool, str]]) -> None:
        """Consume here-document bodies that start after the line just ended."""
        text, n = self.text, self.n
        for redirect, strip_tabs, delim in pending:
            start = self.pos
            body_end = n
            while self.pos < n:
                nl = text.find("\n", self.pos)
                line_end = n if nl < 0 else nl
                line = text[self.pos : line_end]
                if (line.lstrip("\t") if strip_tabs else line) == delim:
                    body_end = self.pos
                    self.pos = min(line_end + 1, n)
                    break
                self.pos = line_end + 1
            else:
                self.pos = n
            redirect.body = text[start:body_end]
            if not redirect.target.quoted:  # unquoted delimiter: $( ) in the body runs
                redirect.body_subs = self._subs_in(redirect.body)
        pending.clear()

    # ----------------------------------------------------------------- words

    def _word(self) -> Word | None:
        """Read one word. Returns None when the word was only an ``$IFS`` separator."""
        text, n = self.text, self.n
        parts: list[str] = []
        subs: list[Sub] = []
        quoted = False
        while self.pos < n:
            m = _PLAIN.match(text, self.pos)
            if m:
                parts.append(m.group())
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
                self._dquote(parts, subs, closing=True)
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
        return Word("".join(parts), quoted, tuple(subs))

    def _dquote(self, parts: list[str], subs: list[Sub], closing: bool) -> None:
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

    def _dollar(self, parts: list[str], subs: list[Sub], in_dquote: bool) -> object:
        text, start = self.text, self.pos
        nxt = text[start + 1 : start + 2]
        if nxt == "(":
            if text.startswith("$((", start):
                self._arith(parts, subs)
            else:
                self.pos = start + 2
                sub_script = self._nested(end=")")
                raw = text[start : self.pos]
                subs.append(Sub("cmd", sub_script, raw))
                parts.append(raw)
            return None
        if nxt == "{":
            return self._param(parts, subs, in_dquote)
        if nxt == "'" and not in_dquote:
            close = start + 2
            while True:
                close = text.find("'", close)
                if close < 0:
                    raise ParseError("unterminated $'...' string")
                if _backslashes_before(text, close) % 2 == 0:
                    break
                close += 1
            parts.append(decode_ansi_c(text[start + 2 : close]))
            self.pos = close + 1
            return _QUOTED
        if nxt == '"' and not in_dquote:
            self.pos = start + 2
            self._dquote(parts, subs, closing=True)
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
        text, n, start = self.text, self.n, self.pos
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
                self._dquote([], subs, closing=True)
            elif c == "$":
                if text.startswith("${", self.pos):
                    self.pos += 2
                    depth += 1
                else:
                    self._dollar([], subs, in_dquote=True)
            elif c == "`":
                self._backtick([], subs, in_dquote)
            elif c == "{":
                self.pos += 1
                depth += 1
            else:
                self.pos += 1
                depth -= 1
        if self.pos > n:
            raise ParseError("unterminated ${")
        inner = text[start + 2 : self.pos - 1]
        if inner.startswith("IFS") and not inner[3:4].isalnum() and inner[3:4] != "_":
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
        subs.extend(self._subs_in(raw[3:-2]))
        parts.append(raw)

    def _arith_command(self) -> Word:
        """``(( ... ))`` at command position; kept as one opaque, quoted word."""
        start = self.pos
        end = self._matching_parens(start + 2, depth=2)
        self.pos = end
        raw = self.text[start:end]
        return Word(raw, True, self._subs_in(raw[2:-2]))

    def _matching_parens(self, pos: int, depth: int) -> int:
        text, n = self.text, self.n
        while depth:
            i = _next_paren(text, pos)
            if i < 0:
                raise ParseError("unterminated arithmetic")
            depth += 1 if text[i] == "(" else -1
            pos = i + 1
        if pos > n:
            raise ParseError("unterminated arithmetic")
        return pos

    def _array_literal(self, word: Word) -> Word:
        """``name=( a b c )`` is an array assignment, not a subshell."""
        start = self.pos
        end = self._matching_parens(start + 1, depth=1)
        self.pos = end
        raw = self.text[start:end]
        return Word(word.value + raw, True, word.subs + self._subs_in(raw))

    def _backtick(self, parts: list[str], subs: list[Sub], in_dquote: bool) -> None:
        text, start = self.text, self.pos
        close = start + 1
        while True:
            close = text.find("`", close)
            if close < 0:
                raise ParseError("unterminated backtick")
            if _backslashes_before(text, close) % 2 == 0:
                break
            close += 1
        raw = text[start : close + 1]
        body = _unescape_backtick(text[start + 1 : close], in_dquote)
        subs.append(Sub("cmd", parse(body, self.budget, self.depth + 1), raw))
        parts.append(raw)
        self.pos = close + 1

    def _process_sub(self) -> Word:
        start = self.pos
        self.pos += 2
        sub_script = self._nested(end=")")
        raw = self.text[start : self.pos]
        return Word(raw, False, (Sub("proc", sub_script, raw),))

    def _nested(self, end: str) -> Script:
        if self.depth + 1 > MAX_DEPTH:
            raise ParseError("nesting too deep")
        self.depth += 1
        try:
            return self.script(end=end)
        finally:
            self.depth -= 1

    def _subs_in(self, body: str) -> tuple[Sub, ...]:
        """Substitutions inside text that expands like a double-quoted string."""
        if "$" not in body and "`" not in body:
            return ()
        if self.depth + 1 > MAX_DEPTH:
            raise ParseError("nesting too deep")
        self.budget.spend(len(body))
        inner = _Parser(body, self.budget, self.depth + 1)
        subs: list[Sub] = []
        inner._dquote([], subs, closing=False)
        return tuple(subs)


_PAREN = re.compile(r"[()]")


def _next_paren(text: str, pos: int) -> int:
    m = _PAREN.search(text, pos)
    return -1 if m is None else m.start()


def _backslashes_before(text: str, pos: int) -> int:
    count = 0
    while pos - count - 1 >= 0 and text[pos - count - 1] == "\\":
        count += 1
    return count


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
