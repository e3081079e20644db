"""``classify(command) -> Verdict``: is a shell command safe, dangerous, or hardline?

The pipeline: normalise the text (``normalize.py``), split it into simple commands
(``split.py``), and for each command expand what we statically can (``expand.py``), peel
wrappers (``unwrap.py``), and apply the rules for the command that actually runs
(``rules*.py``). Text a command *executes* (``bash -c``, ``eval``, here-documents fed to
a shell, ``echo ... | sh``) is classified recursively; text a command only *receives*
(``echo "rm -rf /"``) is not.

Anything we cannot analyse fails closed: over 128k characters, unparseable, nested too
deep, too many commands or too much re-parsed text is "dangerous", and "hardline" when a
coarse scan of the text still shows a hardline signature.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from runner.safety.shell.common import NO_TRAITS, Traits, check_write
from runner.safety.shell.expand import ASSIGNMENT, expand, stdin_text, strip_keywords
from runner.safety.shell.normalize import normalize
from runner.safety.shell.paths import normalize_path
from runner.safety.shell.payloads import coarse_hardline, is_fork_bomb, scan_code, scan_sql
from runner.safety.shell.rules import run_rules
from runner.safety.shell.rules_net import canonical_name, replay_transform
from runner.safety.shell.split import parse
from runner.safety.shell.syntax import MAX_DEPTH, Command, ParseBudget, ParseError, Redirect, Script, render
from runner.safety.shell.unwrap import unwrap

Level = Literal["safe", "dangerous", "hardline"]

MAX_INPUT = 128 * 1024
_REPARSE_SLACK = 64 * 1024  # characters re-parsed beyond twice the input (bash -c, eval, ...)
_WRITE_OPS = frozenset({">", ">>", ">|", "<>", "&>", "&>>"})
_DECLARE = frozenset({"export", "declare", "typeset", "local", "readonly"})


@dataclass(frozen=True)
class Verdict:
    """The classification of one command string.

    ``reasons`` are short human phrases, hardline ones first. ``segments`` are the
    normalised simple commands that were examined, nested ones included, in order.
    ``flagged`` are the top-level pipelines (normalised, stages joined by `` | ``) that
    produced a finding: a policy should approve a dangerous command through ``allow:``
    globs only when every flagged pipeline matches one.
    """

    level: Level
    reasons: tuple[str, ...] = ()
    segments: tuple[str, ...] = ()
    flagged: tuple[str, ...] = ()


def classify(command: str) -> Verdict:
    """Classify one shell command string. Pure and fast; never raises on any ``str``."""
    if len(command) > MAX_INPUT:
        return _failed(normalize(command), "command longer than 128k characters")
    text = normalize(command)
    ctx = _Context(text)
    try:
        ctx.run_script(text)
    except ParseError as exc:
        return _failed(text, f"could not parse ({exc})")
    except RecursionError:
        return _failed(text, "nesting too deep")
    except Exception:  # a classifier bug must block, not crash the run; tests assert it never happens
        return _failed(text, "internal classifier error")
    return ctx.verdict()


def _failed(text: str, why: str) -> Verdict:
    hard = coarse_hardline(text)
    return Verdict("hardline" if hard else "dangerous", (*hard, f"{why}: failing closed"), (), (text.strip(),))


class _Context:
    """State of one classification; implements the ``Sink`` the rules report to."""

    def __init__(self, text: str) -> None:
        self.cwd: str | None = None
        self.downloaded: set[str] = set()
        self._vars: dict[str, str] = {}
        self._hard: dict[str, None] = {}
        self._danger: dict[str, None] = {}
        self._segments: list[str] = []
        self._flagged: dict[str, None] = {}
        self._budget = ParseBudget(2 * len(text) + _REPARSE_SLACK)
        self._depth = -1
        self._top = text.strip()

    def verdict(self) -> Verdict:
        level: Level = "hardline" if self._hard else "dangerous" if self._danger else "safe"
        return Verdict(level, (*self._hard, *self._danger), tuple(self._segments), tuple(self._flagged))

    # ------------------------------------------------------------------ Sink

    def hard(self, reason: str) -> None:
        self._hard[reason] = None
        self._flagged[self._top] = None

    def danger(self, reason: str) -> None:
        self._danger[reason] = None
        self._flagged[self._top] = None

    def run_script(self, text: str) -> None:
        """Examine shell text that will be executed, one nesting level down."""
        self._enter()
        try:
            self._script(parse(text, self._budget, self._depth))
        finally:
            self._depth -= 1

    def run_argv(self, argv: tuple[str, ...]) -> None:
        self._enter()
        try:
            self._argv(argv, None)
        finally:
            self._depth -= 1

    def _enter(self) -> None:
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise ParseError("nesting too deep")

    # ------------------------------------------------------------------ structure

    def _script(self, script: Script) -> tuple[bool, bool]:
        """Examine every pipeline; report whether anything downloads or decodes."""
        if is_fork_bomb(script.skeleton):
            self.hard("fork bomb")
        downloads = decodes = False
        for pipeline in script.pipelines:
            texts = [render(c) for c in pipeline.commands]
            if self._depth == 0:
                self._top = " | ".join(texts)
            traits = [self._command(c, t) for c, t in zip(pipeline.commands, texts, strict=True)]
            if len(traits) > 1:
                self._pipeline(traits)
            downloads = downloads or any(t.downloads for t in traits)
            decodes = decodes or any(t.decodes for t in traits)
        return downloads, decodes

    def _command(self, cmd: Command, text: str) -> Traits:
        self._segments.append(text)
        downloads, decodes = self._substitutions(cmd)
        if cmd.redirects:
            self._redirects(cmd.redirects)
        argv = self._assignments(expand(cmd.words, self._vars))
        if not argv:
            return NO_TRAITS
        traits = self._argv(argv, stdin_text(cmd.redirects) if cmd.redirects else None)
        if traits.shellish and downloads:
            self.danger("download substituted into a shell")
        if traits.shellish and decodes:
            self.danger("decoded payload substituted into a shell")
        return traits

    def _substitutions(self, cmd: Command) -> tuple[bool, bool]:
        """Examine ``$( )``, backticks and ``<( )`` of one command; they run first."""
        if not cmd.redirects and not any(w.subs for w in cmd.words):
            return False, False
        subs = [s for w in cmd.words for s in w.subs]
        for r in cmd.redirects:
            subs.extend(r.target.subs)
            subs.extend(r.body_subs)
        downloads = decodes = False
        for sub in subs:
            self._enter()
            try:
                d, e = self._script(sub.script)
            finally:
                self._depth -= 1
            downloads, decodes = downloads or d, decodes or e
        return downloads, decodes

    def _argv(self, argv: tuple[str, ...], stdin: str | None) -> Traits:
        """Peel wrappers, apply the rules, and follow what the command reads on stdin."""
        for _ in range(64):
            argv = strip_keywords(argv)
            step = unwrap(argv) if argv else None
            if step is None:
                break
            for reason in step.reasons:
                self.danger(reason)
            for assignment in step.assignments:
                self._assign(assignment, standalone=False)
            for payload in step.payloads:
                self.run_script(payload)
            argv = step.argv
        if not argv:
            return NO_TRAITS
        name = canonical_name(argv[0])
        if name in ("cd", "pushd"):
            self._cd(argv[1:])
            return NO_TRAITS
        if name in _DECLARE:
            for arg in argv[1:]:
                self._assign(arg, standalone=True)
            return NO_TRAITS
        traits = run_rules(argv, self)
        if stdin is not None:
            self._feed(traits, stdin)
            if name == "cat" and len(argv) == 1:
                return Traits(stdout_text=stdin)
        return traits

    def _feed(self, traits: Traits, stdin: str) -> None:
        """Known text arrives on the standard input of a command: does it execute it?"""
        if traits.stdin_exec == "shell":
            self.run_script(stdin)
        elif traits.stdin_exec == "interpreter":
            scan_code(stdin, self)
        if traits.sql:
            scan_sql(stdin, self)

    def _pipeline(self, stages: list[Traits]) -> None:
        """What flows between stages: network or decoded data into a shell, known text
        into a shell or a database client, a shell wired to a socket."""
        downloads = decodes = False
        text: str | None = None
        for t in stages:
            if t.stdin_exec:
                if downloads:
                    self.danger("pipe from network into shell")
                if decodes:
                    self.danger("decoded payload piped into shell")
            if text is not None:
                self._feed(t, text)
            downloads, decodes = downloads or t.downloads, decodes or t.decodes
            if t.stdout_text is not None:
                text = t.stdout_text
            else:
                text = replay_transform(t.transform, text) if text is not None else None
        if any(t.socket for t in stages) and any(t.stdin_exec == "shell" or t.interactive for t in stages):
            self.danger("reverse shell (shell wired to a network socket)")

    def _redirects(self, redirects: tuple[Redirect, ...]) -> None:
        for r in redirects:
            target = r.target.value
            if "/dev/tcp/" in target or "/dev/udp/" in target:
                self.danger("network socket via /dev/tcp (reverse shell)")
            if r.op in _WRITE_OPS or (r.op == ">&" and not (target.isdigit() or target == "-")):
                check_write(target, self, how="redirect")

    # ------------------------------------------------------------------ state

    def _cd(self, args: tuple[str, ...]) -> None:
        operands = [a for a in args if not a.startswith("-") or a == "-"]
        target = operands[0] if operands else "~"
        if target == "-":
            self.cwd = None
            return
        path = normalize_path(target, self.cwd)
        self.cwd = path if path.startswith("/") else None

    def _assign(self, word: str, standalone: bool) -> None:
        m = ASSIGNMENT.match(word)
        if not m:
            return
        name, value = m.groups()
        if name == "DOCKER_HOST":
            self.danger("DOCKER_HOST (talks to another Docker daemon)")
        if standalone:
            self._vars[name] = value

    def _assignments(self, argv: tuple[str, ...]) -> tuple[str, ...]:
        """Strip leading ``NAME=value`` words; remember them when nothing else follows.

        ``HOME=/x rm -rf $HOME`` expands ``$HOME`` before the assignment applies, so a
        prefix assignment must not change how later words of the same command expand."""
        i = 0
        while i < len(argv) and ASSIGNMENT.match(argv[i]):
            i += 1
        for word in argv[:i]:
            self._assign(word, standalone=i == len(argv))
        return argv[i:]
