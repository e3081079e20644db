"""A small, linear-time shell tokenizer that splits a command line into simple commands.

Why hand-written: bashlex needs hundreds of microseconds for a one-line command, raises on
plenty of real-world syntax, and recurses deeply on adversarial input; the classifier must
stay under ~50 µs per command and fail *closed*, never slow. This module understands just
enough of bash to find every place a command can start:

* separators ``;  &&  ||  |  |&  &`` and newlines, subshell and group parentheses;
* quoting and expansions (see ``words.py``), including ``$( )``, backticks and
  ``<( ) >( )`` anywhere a shell would run them, each parsed recursively;
* redirections with their targets, and here-documents, whose bodies are kept as data
  (substitutions in an unquoted here-document still run, so they are parsed too);
* ``(( ... ))`` arithmetic and ``name=( ... )`` arrays, so their ``<<`` and parentheses
  are not mistaken for here-documents or subshells;
* function definitions (``NAME () { ...; }``), whose body text ``functions.py`` finds.

Anything it cannot make sense of raises ``ParseError``, which the classifier treats as
dangerous.
"""

from __future__ import annotations

import re

from runner.safety.shell.functions import FunctionScanner
from runner.safety.shell.syntax import MAX_DEPTH, Command, ParseBudget, ParseError, Pipeline, Redirect, Script, Word
from runner.safety.shell.words import WordReader

# One match classifies the next token. A plain word followed directly by a delimiter
# (the common case) is complete without going through the general word reader.
_TOKEN = re.compile(
    r"""[^\S\n]*(?:
        (?P<nl>\n)
      | (?P<comment>\#)
      | (?P<proc>[<>]\()
      | (?P<fd>\d+|\{[A-Za-z_]\w*\})?(?P<redir>&>>|&>|<<<|<<-|<<|<>|<&|>&|>>|>\||<|>)
      | (?P<op>;;&|;;|;&|\|\||&&|\|&|[;&|()])
      | (?P<end>\Z)
      | (?P<plain>[^\s'"\\$`<>|&;()]+)(?P<whole>(?=[\s<>|&;()]|\Z))?
      | (?P<other>)
    )""",
    re.VERBOSE,
)
_BLANKS = re.compile(r"[^\S\n]*")  # bash splits on space/tab only; other blanks as well can
# only make more text look like commands, never less
_PendingHeredoc = tuple[Redirect, bool, str]


def parse(text: str, budget: ParseBudget, depth: int = 0) -> Script:
    """Parse ``text`` into pipelines of simple commands (see the module docstring)."""
    if depth > MAX_DEPTH:
        raise ParseError("nesting too deep")
    budget.spend(len(text))
    return _Parser(text, budget, depth).script(end=None)


class _Parser(WordReader):
    def script(self, end: str | None) -> Script:
        """Parse commands until end of text, or until the ``)`` closing a substitution."""
        text = self.text
        pipelines: list[Pipeline] = []
        commands: list[Command] = []
        words: list[Word] = []
        redirects: list[Redirect] = []
        pending: list[_PendingHeredoc] = []
        skel: list[str] = []
        parens = 0  # open subshell parentheses inside this script
        functions: FunctionScanner | None = None  # made at the first "NAME (" or "function NAME {"

        def end_command() -> None:
            if words or redirects:
                self.budget.command(len(words) + len(redirects))
                commands.append(Command(tuple(words), tuple(redirects)))
                words.clear()
                redirects.clear()

        def end_pipeline() -> None:
            end_command()
            if commands:
                pipelines.append(Pipeline(tuple(commands)))
                commands.clear()

        while True:
            m = _TOKEN.match(text, self.pos)
            assert m is not None  # the pattern can always match (at worst: blanks, then a word)
            kind = m.lastgroup
            if kind == "whole":  # the common case, kept cheap
                self.pos = m.end()
                value = m.group("plain")
                if (value == "{" or value == "}") and (
                    (functions is not None and functions.watching) or (value == "{" and len(words) >= 2)
                ):  # braces count only while a body may be open; "function NAME {" opens one
                    functions = functions or FunctionScanner(text)
                    functions.brace(value, words, m.start("plain"), self.pos)
                words.append(self._maybe_array(Word(value)) if value[-1] == "=" else Word(value))
                skel.append(value)
                continue
            if kind == "plain":  # a word that continues with quotes or expansions
                self.pos = m.start("plain")
                word: Word | None = self.word()
                if word is not None:
                    words.append(self._maybe_array(word))
                    skel.append(_skeleton_word(word))
                continue
            self.pos = m.end()
            if kind == "end":
                if end is not None:
                    raise ParseError("unterminated substitution")
                break
            if kind == "nl":
                end_pipeline()
                skel.append(";")
                if pending:
                    self._heredoc_bodies(pending)
            elif kind == "comment":
                nl = text.find("\n", self.pos)
                self.pos = self.n if nl < 0 else nl
            elif kind == "proc":
                self.pos = m.start("proc")
                words.append(self.process_sub())
                skel.append("P")
            elif kind == "redir":
                op = m.group("redir")
                self._redirect(m.group("fd") or "", op, redirects, pending)
                skel.append(op)
            elif kind == "op":
                op = m.group("op")
                if op == ")":
                    if parens == 0 and end == ")":
                        break
                    parens = max(parens - 1, 0)
                    if functions is not None:
                        functions.paren_closed(parens, self.pos)
                elif op == "(":
                    if not words and text.startswith("(", self.pos):
                        self.pos -= 1
                        words.append(self.arith_command())
                        skel.append("A")
                        continue
                    if words:
                        functions = functions or FunctionScanner(text)
                        after = functions.header(words, self.pos)
                        if after >= 0:  # NAME (): a function definition, not a subshell
                            self.pos = after
                            skel.append("( )")
                            end_pipeline()
                            continue
                    parens += 1
                    if functions is not None:
                        functions.paren_opened(parens, self.pos - 1)
                skel.append(op)
                if op in ("|", "|&"):
                    end_command()
                else:
                    end_pipeline()
            else:  # "other": a word that starts with a quote, $, backslash or backtick
                word = self.word()
                if word is not None:
                    words.append(self._maybe_array(word))
                    skel.append(_skeleton_word(word))
        end_pipeline()
        if pending:  # here-document never terminated: bash reads to EOF, so do we
            self._heredoc_bodies(pending)
        return Script(tuple(pipelines), " ".join(skel), functions.finish() if functions else ())

    def _maybe_array(self, word: Word) -> Word:
        if not word.quoted and word.value.endswith("=") and self.text.startswith("(", self.pos):
            return self.array_literal(word)
        return word

    def _redirect(self, fd: str, op: str, redirects: list[Redirect], pending: list[_PendingHeredoc]) -> None:
        m = _BLANKS.match(self.text, self.pos)
        if m:
            self.pos = m.end()
        if self.text.startswith(("<(", ">("), self.pos):
            target = self.process_sub()
        else:
            word = self.word()
            if word is None or (not word.value and not word.quoted):
                raise ParseError(f"redirection {op} without a target")
            target = word
        redirect = Redirect(fd, op, target)
        redirects.append(redirect)
        if op in ("<<", "<<-"):
            pending.append((redirect, op == "<<-", target.value))

    def _heredoc_bodies(self, pending: list[_PendingHeredoc]) -> None:
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
                redirect.body_subs = self.subs_in(redirect.body)
        pending.clear()


_SKELETON_SAFE = re.compile(r"[\w:./@%+=,~-]+")


def _skeleton_word(word: Word) -> str:
    """Quoted words become ``Q`` unless quoting changed nothing structural (``\\:``)."""
    if not word.quoted or _SKELETON_SAFE.fullmatch(word.value):
        return word.value or "Q"
    return "Q"
