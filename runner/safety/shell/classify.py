"""``classify(command) -> Verdict``: is a shell command safe, dangerous, or hardline?

The pipeline: normalise the text (``normalize.py``), split it into simple commands
(``split.py``), and for each command expand what we statically can (``expand.py``), peel
wrappers (``unwrap.py``), and apply the rules for the command that actually runs
(``rules*.py``). Text a command *executes* (``bash -c``, ``eval``, here-documents fed to
a shell, ``echo ... | sh``, the body of an alias or function it uses: ``defs.py``) is
classified recursively; text a command only *receives* (``echo "rm -rf /"``) is not.

Anything we cannot analyse fails closed: over 128k characters, unparseable, nested too
deep, too many commands or too much re-parsed text is "dangerous", and "hardline" when a
coarse scan of the text still shows a hardline signature.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Literal

from runner.safety.shell.common import MAX_WRITTEN, NO_TRAITS, TOO_LARGE, Traits, check_write
from runner.safety.shell.defs import (
    Definitions,
    Expansion,
    Kind,
    Use,
    assigned_definitions,
    body_traits,
    called,
    expansion,
)
from runner.safety.shell.expand import ASSIGNMENT, ELEMENT, UNKNOWN, expand, stdin_text, strip_keywords
from runner.safety.shell.normalize import normalize
from runner.safety.shell.paths import normalize_path
from runner.safety.shell.payloads import coarse_hardline, is_fork_bomb, scan_sql
from runner.safety.shell.rules import STDIN_COMMANDS, run_rules
from runner.safety.shell.rules_exec import runs_code
from runner.safety.shell.rules_net import canonical_name, replay_transform
from runner.safety.shell.rules_shell import check_assignment
from runner.safety.shell.rules_written import run_code
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
        return _failed(text, f"could not parse ({exc})", ctx.hard_found())
    except RecursionError:
        return _failed(text, "nesting too deep", ctx.hard_found())
    except Exception:  # a classifier bug must block, not crash the run; tests assert it never happens
        return _failed(text, "internal classifier error", ctx.hard_found())
    return ctx.verdict()


def _failed(text: str, why: str, found: tuple[str, ...] = ()) -> Verdict:
    """Fail closed: dangerous, or hardline when the coarse scan or the part already read found one."""
    hard = tuple(dict.fromkeys((*found, *coarse_hardline(text))))
    return Verdict("hardline" if hard else "dangerous", (*hard, f"{why}: failing closed"), (), (text.strip(),))


class _Context:
    """State of one classification; implements the ``Sink`` the rules report to."""

    def __init__(self, text: str) -> None:
        self.cwd: str | None = None
        self.downloaded: set[str] = set()
        self.written: dict[str, str | None] = {}
        self._vars: dict[str, str] = {}
        self._hard: dict[str, None] = {}
        self._danger: dict[str, None] = {}
        self._segments: list[str] = []
        self._flagged: dict[str, None] = {}
        self._budget = ParseBudget(2 * len(text) + _REPARSE_SLACK)
        self._depth = -1
        self._top = text.strip()
        self._defs = Definitions()
        self._expanding: set[str] = set()  # names whose body is being examined: a use inside is not expanded
        self._expanded: dict[tuple[str | None, str | None, int], tuple[Traits, bool]] = {}  # by text, cwd, variables
        self._findings = 0  # findings reported so far (a body examined again flags its use if it had any)
        self._vars_version = 0
        self._contained = 0  # inside a container that does not expose the host: hardline counts as dangerous

    def hard_found(self) -> tuple[str, ...]:
        """The hardline reasons found before the classification stopped."""
        return tuple(self._hard)

    def verdict(self) -> Verdict:
        level: Level = "hardline" if self._hard else "dangerous" if self._danger else "safe"
        return Verdict(level, (*self._hard, *self._danger), tuple(self._segments), tuple(self._flagged))

    # ------------------------------------------------------------------ Sink

    def hard(self, reason: str) -> None:
        if self._contained and reason != "fork bomb":
            self.danger(f"{reason} (inside a container)")
            return
        self._hard[reason] = None
        self._flagged[self._top] = None
        self._findings += 1

    def danger(self, reason: str) -> None:
        self._danger[reason] = None
        self._flagged[self._top] = None
        self._findings += 1

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

    def run_in_container(self, argv: tuple[str, ...], host_exposed: bool) -> None:
        contained = 0 if host_exposed else 1
        self._contained += contained
        try:
            self.run_argv(argv)
        finally:
            self._contained -= contained

    def _enter(self) -> None:
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise ParseError("nesting too deep")

    # ------------------------------------------------------------------ structure

    def _script(self, script: Script) -> _Flow:
        """Examine every pipeline; report whether anything downloads or decodes, and the
        script's output when every pipeline's output is known."""
        if is_fork_bomb(script.skeleton):
            self.hard("fork bomb")
        for fn in script.functions:
            self._define(fn.name, "function", fn.body)
        downloads = decodes = False
        outputs: list[str] | None = []
        reader: Traits | None = None
        for pipeline in script.pipelines:
            texts = [render(c) for c in pipeline.commands]
            if self._depth == 0:
                self._top = " | ".join(texts)
            traits = [self._command(c, t) for c, t in zip(pipeline.commands, texts, strict=True)]
            out = self._pipeline(traits) if len(traits) > 1 else traits[0].stdout_text
            if outputs is not None:
                outputs = None if out is None else [*outputs, out]
            downloads = downloads or any(t.downloads for t in traits)
            decodes = decodes or any(t.decodes for t in traits)
            if reader is None and self._expanding:  # only a body's reader is asked for
                reader = _reader(traits)
        output = "\n".join(o.rstrip("\n") for o in outputs) if outputs else None
        return _Flow(downloads, decodes, output, reader)

    def _command(self, cmd: Command, text: str) -> Traits:
        self._segments.append(text)
        flow, outputs = self._substitutions(cmd)
        if cmd.redirects:
            self._redirects(cmd.redirects)
        argv = self._assignments(expand(cmd.words, self._vars, outputs))
        stdin = stdin_text(cmd.redirects, outputs) if cmd.redirects else None
        if not argv:
            return NO_TRAITS
        traits = self._argv(argv, stdin)
        if (flow.downloads or flow.decodes) and _head_substituted(cmd):
            traits = replace(traits, shellish=True)  # the command itself is a command's output
        if stdin is not None and traits.stdout_text is None and traits.transform:
            traits = replace(traits, stdout_text=replay_transform(traits.transform, stdin))
        if traits.shellish and flow.downloads:
            self.danger("download substituted into a shell")
        if traits.shellish and flow.decodes:
            self.danger("decoded payload substituted into a shell")
        if traits.lang:
            self._process_sub_operands(cmd, traits.lang, outputs)
        if cmd.redirects:
            self._record_writes(cmd.redirects, traits.stdout_text)
        return traits

    def _substitutions(self, cmd: Command) -> tuple[_Flow, dict[str, str]]:
        """Examine ``$( )``, backticks and ``<( )`` of one command; they run first. Returns
        what they do and the output of those whose output is known, by source text."""
        if not cmd.redirects and not any(w.subs for w in cmd.words):
            return _NO_FLOW, {}
        subs = [s for w in cmd.words for s in w.subs]
        for r in cmd.redirects:
            subs.extend(r.target.subs)
            subs.extend(r.body_subs)
        downloads = decodes = False
        outputs: dict[str, str] = {}
        for sub in subs:
            self._enter()
            try:
                flow = self._script(sub.script)
            finally:
                self._depth -= 1
            downloads, decodes = downloads or flow.downloads, decodes or flow.decodes
            if flow.output is not None:
                outputs[sub.raw] = flow.output
        return _Flow(downloads, decodes, None), outputs

    def _process_sub_operands(self, cmd: Command, lang: str, outputs: dict[str, str]) -> None:
        """``bash <(...)``, ``source <(...)``, ``python3 <(...)``: the substitution's output
        is the program. Known output is examined; unknown output is code we cannot see."""
        for word in cmd.words[1:]:
            for sub in word.subs:
                if sub.kind != "proc" or not sub.raw.startswith("<("):
                    continue
                text = outputs.get(sub.raw)
                if text is None:
                    self.danger("runs the output of a process substitution")
                else:
                    self.danger("runs code from a process substitution")
                    run_code(text, self, lang)

    def _record_writes(self, redirects: tuple[Redirect, ...], text: str | None) -> None:
        """Remember files this command writes, with their text when it is known, so a
        script written and then run in the same command line is examined."""
        for r in redirects:
            if r.op in _WRITE_OPS:
                known = text if r.fd in ("", "1") else None  # stderr or another descriptor: unknown
                self._remember(r.target.value, known, append=r.op in (">>", "&>>"))

    def _remember(self, path: str, text: str | None, append: bool = False) -> None:
        key = normalize_path(path, self.cwd)
        old = self.written.get(key, "") if append else ""
        if text is None or old is None:
            self.written[key] = None
        elif old is TOO_LARGE or len(old) + len(text) > MAX_WRITTEN:
            self.written[key] = TOO_LARGE
        else:
            self.written[key] = old + text + "\n"

    def _argv(self, argv: tuple[str, ...], stdin: str | None) -> Traits:
        """Peel wrappers, apply the rules, and follow what the command reads on stdin."""
        ran_code = False
        for _ in range(64):
            argv = strip_keywords(argv)
            if argv and canonical_name(argv[0]) == "xargs":
                return self._xargs(argv, stdin)
            step = unwrap(argv) if argv else None
            if step is None:
                break
            for reason in step.reasons:
                self.danger(reason)
            for assignment in step.assignments:
                self._assign(assignment, standalone=False)
            for payload in step.payloads:
                self.run_script(payload)
                ran_code = True
            argv = step.argv
        if not argv:
            return _RAN_CODE if ran_code else NO_TRAITS
        traits = self._simple(argv)
        if argv[0] not in self._expanding:  # a use of an alias or function runs its bodies too
            found = self._defs.use(argv, self.cwd, self._top)
            if found:
                traits = called(traits, [self._examine(f) for f in found])
        if stdin is not None:
            self._feed(traits, stdin)
            if len(argv) == 1 and canonical_name(argv[0]) == "cat":
                return Traits(stdout_text=stdin)
        return traits

    def _simple(self, argv: tuple[str, ...]) -> Traits:
        """The rules for one unwrapped command; builtins that change what the classifier
        knows (``cd``, ``export``, ``alias``) update it."""
        name = canonical_name(argv[0])
        if UNKNOWN.search(argv[0], _known_prefix(argv[0])):
            self.danger("command name comes from an expansion the classifier cannot resolve")
        if name in ("cd", "pushd"):
            self._cd(argv[1:])
            return NO_TRAITS
        if name in _DECLARE:
            for arg in argv[1:]:
                self._assign(arg, standalone=True)
            return NO_TRAITS
        if name == "alias":
            self._aliases(argv[1:])
            return NO_TRAITS
        if name in _SILENT:
            return Traits(stdout_text="")
        return run_rules(argv, self)

    def _xargs(self, argv: tuple[str, ...], stdin: str | None) -> Traits:
        """``xargs [opts] CMD``: CMD runs with words read from stdin. Unknown input may be
        anything; known input (``echo / | xargs rm -rf``) is put in place."""
        template, replace_str = xargs_template(argv)
        if runs_code(template):
            self.danger("xargs runs code")
        self._xargs_run(template, replace_str, stdin)
        return Traits(xargs=(template, replace_str))

    def _xargs_run(self, template: tuple[str, ...], replace_str: str | None, text: str | None) -> None:
        if replace_str is not None:
            items = [_UNKNOWN_INPUT] if text is None else [line for line in text.split("\n") if line.strip()]
            if text is not None and len(items) > 1:
                items.insert(0, text.strip())  # also as one item: a payload split over lines is judged whole
            for item in items[:_XARGS_ITEMS]:
                self.run_argv(tuple(a.replace(replace_str, item) for a in template))
        else:
            words = [_UNKNOWN_INPUT] if text is None else text.split()
            self.run_argv(template + tuple(words[:_XARGS_ITEMS]))

    def _feed(self, traits: Traits, stdin: str) -> None:
        """Known text arrives on the standard input of a command: does it execute it?"""
        if traits.stdin_exec == "shell":
            self.run_script(stdin)
        elif traits.stdin_exec == "interpreter":
            run_code(stdin, self, "interpreter")
        elif traits.stdin_exec in STDIN_COMMANDS:
            for command in STDIN_COMMANDS[traits.stdin_exec](stdin):
                self.run_script(command)
        if traits.sql:
            scan_sql(stdin, self)
        if traits.xargs is not None:
            self._xargs_run(traits.xargs[0], traits.xargs[1], stdin)
        for path in traits.tees:
            self._remember(path, stdin)

    def _pipeline(self, stages: list[Traits]) -> str | None:
        """What flows between stages: network or decoded data into a shell, known text
        into a shell or a database client, a shell wired to a socket. Returns the output of
        the last stage when it is known."""
        downloads = decodes = False
        text: str | None = None
        for t in stages:
            if t.stdin_exec or t.xargs is not None:
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
        return text

    def _redirects(self, redirects: tuple[Redirect, ...]) -> None:
        for r in redirects:
            target = r.target.value
            if "/dev/tcp/" in target or "/dev/udp/" in target:
                self.danger("network socket via /dev/tcp (reverse shell)")
            if r.op in _WRITE_OPS or (r.op == ">&" and not (target.isdigit() or target == "-")):
                check_write(target, self, how="redirect")

    # ------------------------------------------------------------------ aliases and functions

    def _aliases(self, args: tuple[str, ...]) -> None:
        """``alias NAME=VALUE ...``: VALUE is examined now (as a function's body is where it is
        written) and with the arguments of every use."""
        for arg in args:
            name, eq, value = arg.partition("=")
            if eq and name and not name.startswith("-"):
                self._define(name, "alias", value)
                self._examine(expansion(name, "alias", value, Use((), self.cwd, self._top)))

    def _define(self, name: str, kind: Kind, body: str | None) -> None:
        for found in self._defs.define(name, kind, body):
            self._examine(found, deferred=True)

    def _examine(self, found: Expansion, deferred: bool = False) -> Traits:
        """Examine the text a use runs, once per text, working directory and variables (a
        text seen before flags this use too when it had findings). A deferred one (a use met
        before the definition) runs where the use was met."""
        key = (found.text, found.use.cwd, self._vars_version)
        known = self._expanded.get(key)
        if known is not None:
            if known[1]:
                self._flagged[found.use.top] = None
            return known[0]
        self._expanded[key] = (NO_TRAITS, False)
        saved, before = (self.cwd, self._top), self._findings
        if deferred:
            self.cwd, self._top = found.use.cwd, found.use.top
        self._expanding.add(found.name)
        try:
            traits = self._body(found)
        finally:
            self._expanding.discard(found.name)
            if deferred:
                self.cwd, self._top = saved
        self._expanded[key] = (traits, self._findings > before)
        return traits

    def _body(self, found: Expansion) -> Traits:
        if found.text is None:
            self.danger(f"runs function {found.name}, whose body the classifier cannot delimit")
            return NO_TRAITS
        self._enter()
        try:
            flow = self._script(parse(found.text, self._budget, self._depth))
        finally:
            self._depth -= 1
        return body_traits(flow.reader, flow.output)

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
        for name, kind, body in assigned_definitions(word):
            self._define(name, kind, body)
            self._examine(expansion(name, kind, body, Use((), self.cwd, self._top)))
        m = ASSIGNMENT.match(word)
        if not m:
            return
        name, value = m.groups()
        check_assignment(name, value, word[len(name)] == "+", self)
        if standalone:
            self._vars[name] = value
            self._vars_version += 1

    def _assignments(self, argv: tuple[str, ...]) -> tuple[str, ...]:
        """Strip leading ``NAME=value`` words; remember them when nothing else follows.

        ``HOME=/x rm -rf $HOME`` expands ``$HOME`` before the assignment applies, so a
        prefix assignment must not change how later words of the same command expand."""
        i = 0
        while i < len(argv) and (ASSIGNMENT.match(argv[i]) or ELEMENT.match(argv[i])):
            i += 1
        for word in argv[:i]:
            self._assign(word, standalone=i == len(argv))
        return argv[i:]


@dataclass(frozen=True)
class _Flow:
    downloads: bool
    decodes: bool
    output: str | None  # what the script prints, when it is known
    reader: Traits | None = None  # the first command that executes what it reads on stdin


_NO_FLOW = _Flow(False, False, None)
_RAN_CODE = Traits(shellish=True)  # a wrapper ran shell text (eval, bash -c)


_KNOWN_PREFIX = re.compile(r"^(?:\$HOME|\$\{HOME\}|\$PWD|\$\{PWD\})(?=/)")


def _known_prefix(word: str) -> int:
    """``$HOME/bin/tool`` names a program by a path, not by a hidden expansion."""
    m = _KNOWN_PREFIX.match(word)
    return m.end() if m else 0


def _reader(traits: list[Traits]) -> Traits | None:
    """The first command of a pipeline that executes what it reads on stdin."""
    for t in traits:
        if t.stdin_exec or t.xargs is not None or t.sql:
            return t
    return None


def _head_substituted(cmd: Command) -> bool:
    """Does the command word (after any ``NAME=value``) come from a substitution?"""
    for word in cmd.words:
        if not ASSIGNMENT.match(word.value):
            return bool(word.subs)
    return False


_SILENT = frozenset({"true", "false", ":"})
_UNKNOWN_INPUT = "${xargs_input}"  # an argument xargs reads that we cannot see
_XARGS_ITEMS = 64
_XARGS_VALUE = frozenset(
    {"-a", "-d", "-E", "-L", "-n", "-P", "-s", "--arg-file", "--delimiter", "--eof", "--max-lines",
     "--max-args", "--max-procs", "--max-chars", "--process-slot-var"}
)  # fmt: skip


def xargs_template(argv: tuple[str, ...]) -> tuple[tuple[str, ...], str | None]:
    """The command xargs runs (``echo`` by default) and its ``-I`` replacement string."""
    replace_str: str | None = None
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-") or arg == "-":
            break
        if arg in ("-I", "--replace") and i + 1 < len(argv):
            replace_str = argv[i + 1]
            i += 2
            continue
        if arg.startswith("-I"):
            replace_str = arg[2:]
        elif arg.startswith("--replace") or arg.startswith("-i"):
            replace_str = arg.partition("=")[2] or arg[2:] if not arg.startswith("--") else arg.partition("=")[2]
            replace_str = replace_str or "{}"
        i += 2 if arg in _XARGS_VALUE else 1
    return argv[i:] or ("echo",), replace_str
