"""``classify(command) -> Verdict``: is a shell command safe, dangerous, or hardline?

The pipeline: normalise the text (``normalize.py``), split it into simple commands
(``split.py``), and for each command expand what we statically can (variables assigned
earlier in the same text, ``$(echo rm)``, brace lists), peel wrappers (``unwrap.py``),
and apply the rules for the command that actually runs (``rules*.py``). Text a command
*executes* (``bash -c``, ``eval``, here-documents fed to a shell, ``echo ... | sh``) is
classified recursively; text a command only *receives* (``echo "rm -rf /"``) is not.

Anything we cannot analyse fails closed: over 128k characters, unparseable, nested too
deep, or too much re-parsed text is "dangerous", and "hardline" when a coarse scan of the
text still shows a hardline signature.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from runner.safety.common import NO_TRAITS, Traits, check_write
from runner.safety.normalize import normalize
from runner.safety.paths import normalize_path
from runner.safety.payloads import coarse_hardline, is_fork_bomb, scan_code, scan_sql
from runner.safety.rules import run_rules
from runner.safety.rules_net import canonical_name, echo, printf, replay_transform
from runner.safety.split import MAX_DEPTH, Budget, Command, ParseError, Redirect, Script, Word, parse
from runner.safety.unwrap import unwrap

Level = Literal["safe", "dangerous", "hardline"]

MAX_INPUT = 128 * 1024
_REPARSE_BUDGET = 8 * MAX_INPUT  # total characters parsed, counting every payload re-parse


@dataclass(frozen=True)
class Verdict:
    """The classification of one command string.

    ``reasons`` are short human phrases, hardline ones first. ``segments`` are the
    normalised simple commands that were examined, nested ones included, in order.
    ``flagged`` are the top-level pipelines (normalised, stages joined by `` | ``) that
    produced a finding: a policy approves a dangerous command through ``allow:`` globs
    only when every flagged pipeline matches one.
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
    return Verdict(
        "hardline" if hard else "dangerous",
        (*hard, f"{why}: failing closed"),
        (),
        (text.strip(),),
    )


_KEYWORDS = frozenset({"!", "{", "}", "if", "then", "else", "elif", "fi", "while", "until", "do", "done",
                       "esac", "coproc", "(", ")"})  # fmt: skip
_DATA_ONLY = frozenset({"for", "select", "case", "in"})
_DECLARE = frozenset({"export", "declare", "typeset", "local", "readonly"})
_VAR_REF = re.compile(r"\$(?:\{([A-Za-z_]\w*)\}|([A-Za-z_]\w*))")
_BRACE = re.compile(r"^(.*?)\{([^{}]*,[^{}]*)\}(.*)$", re.S)
_ASSIGN = re.compile(r"^([A-Za-z_]\w*)\+?=(.*)$", re.S)
_SAFE_WORD = re.compile(r"[\w@%+=:,./~*?^!#{}\[\]-]+")
_WRITE_OPS = frozenset({">", ">>", ">|", "<>", "&>", "&>>"})


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
        self._budget = Budget(_REPARSE_BUDGET)
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
            script = parse(text, self._budget, max(self._depth, 0))
            if is_fork_bomb(script.skeleton):
                self.hard("fork bomb")
            self._script(script)
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
        downloads = decodes = False
        for pipeline in script.pipelines:
            if self._depth == 0:
                self._top = " | ".join(render(c) for c in pipeline.commands)
            traits = [self._command(c) for c in pipeline.commands]
            if len(traits) > 1:
                self._pipeline(traits)
            downloads = downloads or any(t.downloads for t in traits)
            decodes = decodes or any(t.decodes for t in traits)
        return downloads, decodes

    def _substitutions(self, cmd: Command) -> tuple[bool, bool]:
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

    def _command(self, cmd: Command) -> Traits:
        self._segments.append(render(cmd))
        downloads, decodes = self._substitutions(cmd) if _has_subs(cmd) else (False, False)
        self._redirects(cmd.redirects)
        argv = self._assignments(self._expand(cmd.words))
        if not argv:
            return NO_TRAITS
        traits = self._argv(argv, _stdin_text(cmd.redirects))
        if traits.shellish and downloads:
            self.danger("download substituted into a shell")
        if traits.shellish and decodes:
            self.danger("decoded payload substituted into a shell")
        return traits

    def _argv(self, argv: tuple[str, ...], stdin: str | None) -> Traits:
        """Peel wrappers, apply the rules, and follow what the command reads on stdin."""
        for _ in range(64):
            argv = _strip_keywords(argv)
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
        m = _ASSIGN.match(word)
        if not m:
            return
        name, value = m.groups()
        if name == "DOCKER_HOST":
            self.danger("DOCKER_HOST (talks to another Docker daemon)")
        if standalone:
            self._vars[name] = value

    def _assignments(self, argv: tuple[str, ...]) -> tuple[str, ...]:
        """Strip leading ``NAME=value`` words; remember them when nothing else follows."""
        i = 0
        while i < len(argv) and _ASSIGN.match(argv[i]):
            i += 1
        for word in argv[:i]:
            self._assign(word, standalone=i == len(argv))
        return argv[i:]

    def _expand(self, words: tuple[Word, ...]) -> tuple[str, ...]:
        out: list[str] = []
        for w in words:
            value = _static_substitutions(w) if w.subs else w.value
            if self._vars and "$" in value:
                expanded = _VAR_REF.sub(self._lookup, value)
                if expanded != value and not w.quoted:
                    out.extend(expanded.split())
                    continue
                value = expanded
            if not w.quoted and "{" in value and "," in value:
                out.extend(_brace_expand(value))
                continue
            out.append(value)
        return tuple(out)

    def _lookup(self, m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        return self._vars.get(name, m.group())


def _has_subs(cmd: Command) -> bool:
    return any(w.subs for w in cmd.words) or any(r.target.subs or r.body_subs for r in cmd.redirects)


def _stdin_text(redirects: tuple[Redirect, ...]) -> str | None:
    text = None
    for r in redirects:
        if r.op in ("<<", "<<-"):
            text = r.body
        elif r.op == "<<<":
            text = r.target.value
    return text


def _strip_keywords(argv: tuple[str, ...]) -> tuple[str, ...]:
    while argv:
        head = argv[0]
        if head in _KEYWORDS:
            argv = argv[1:]
        elif head == "function":
            argv = argv[2:]
        elif head in _DATA_ONLY:
            return ()
        else:
            break
    return argv


def _static_substitutions(word: Word) -> str:
    """Replace ``$(echo rm)`` / ``$(printf /)`` with their output; others stay literal."""
    value = word.value
    for sub in word.subs:
        pipelines = sub.script.pipelines
        if sub.kind != "cmd" or len(pipelines) != 1 or len(pipelines[0].commands) != 1:
            continue
        cmd = pipelines[0].commands[0]
        if not cmd.words or cmd.words[0].value not in ("echo", "printf") or any(w.subs for w in cmd.words):
            continue
        producer = echo if cmd.words[0].value == "echo" else printf
        traits = producer("", tuple(w.value for w in cmd.words[1:]), _NullSink())
        if traits.stdout_text is not None:
            value = value.replace(sub.raw, traits.stdout_text.rstrip("\n"), 1)
    return value


def _brace_expand(value: str, limit: int = 64) -> list[str]:
    results = [value]
    for _ in range(3):
        expanded: list[str] = []
        changed = False
        for item in results:
            m = _BRACE.match(item)
            if m and len(expanded) < limit:
                pre, inner, post = m.groups()
                expanded.extend(pre + part + post for part in inner.split(","))
                changed = True
            else:
                expanded.append(item)
        results = expanded[:limit]
        if not changed:
            break
    return results


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


class _NullSink:
    """For evaluating ``echo`` statically, which reports nothing."""

    cwd: str | None = None
    downloaded: set[str] = set()

    def hard(self, reason: str) -> None: ...
    def danger(self, reason: str) -> None: ...
    def run_argv(self, argv: tuple[str, ...]) -> None: ...
    def run_script(self, text: str) -> None: ...
