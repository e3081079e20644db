"""Static expansion: what we can know about a command's words without running anything.

Obfuscation usually hides a command name or a path behind an expansion the shell
performs: ``x=rm; $x -rf /``, ``$(echo rm) -rf /``, ``{rm,-rf,/}``. We replay the
expansions whose result is certain from the text alone: variables assigned earlier in
the same command string, substitutions that only ``echo`` / ``printf`` literals, and
brace lists. Everything else stays literal.
"""

from __future__ import annotations

import re

from runner.safety.shell.rules_net import echo, printf
from runner.safety.shell.syntax import Redirect, Word

ASSIGNMENT = re.compile(r"^([A-Za-z_]\w*)\+?=(.*)$", re.S)
_VAR_REF = re.compile(r"\$(?:\{([A-Za-z_]\w*)\}|([A-Za-z_]\w*))")
_BRACE = re.compile(r"^(.*?)\{([^{}]*,[^{}]*)\}(.*)$", re.S)
_MAX_BRACE_WORDS = 64

# Words that structure a script but run nothing themselves.
_KEYWORDS = frozenset(
    {"!", "{", "}", "if", "then", "else", "elif", "fi", "while", "until", "do", "done", "esac",
     "coproc", "(", ")"}
)  # fmt: skip
# Commands whose words are all data: "for x in a b c", "case $x in".
_DATA_ONLY = frozenset({"for", "select", "case", "in"})


def expand(words: tuple[Word, ...], variables: dict[str, str]) -> tuple[str, ...]:
    """The argument vector the shell would build, as far as it is statically certain."""
    out: list[str] = []
    for w in words:
        value = _static_substitutions(w) if w.subs else w.value
        if variables and "$" in value:
            expanded = _VAR_REF.sub(lambda m: variables.get(m.group(1) or m.group(2), m.group()), value)
            if expanded != value and not w.quoted:
                out.extend(expanded.split())  # unquoted expansion: word splitting
                continue
            value = expanded
        if not w.quoted and "{" in value and "," in value:
            out.extend(_brace_expand(value))
            continue
        out.append(value)
    return tuple(out)


def strip_keywords(argv: tuple[str, ...]) -> tuple[str, ...]:
    """Drop leading shell keywords (``if``, ``do``, ``{``, ``function f``)."""
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


def stdin_text(redirects: tuple[Redirect, ...]) -> str | None:
    """The text a command reads on stdin when a here-document or here-string gives it."""
    text = None
    for r in redirects:
        if r.op in ("<<", "<<-"):
            text = r.body
        elif r.op == "<<<":
            text = r.target.value
    return text


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


def _brace_expand(value: str) -> list[str]:
    """``pre{a,b}post`` -> ``prea prepost``: up to three groups, at most 64 words."""
    results = [value]
    for _ in range(3):
        expanded: list[str] = []
        changed = False
        for item in results:
            m = _BRACE.match(item)
            if m and len(expanded) < _MAX_BRACE_WORDS:
                pre, inner, post = m.groups()
                expanded.extend(pre + part + post for part in inner.split(","))
                changed = True
            else:
                expanded.append(item)
        results = expanded[:_MAX_BRACE_WORDS]
        if not changed:
            break
    return results


class _NullSink:
    """``echo`` and ``printf`` report nothing; they only need a sink to call."""

    cwd: str | None = None

    def __init__(self) -> None:
        self.downloaded: set[str] = set()

    def hard(self, reason: str) -> None: ...
    def danger(self, reason: str) -> None: ...
    def run_argv(self, argv: tuple[str, ...]) -> None: ...
    def run_script(self, text: str) -> None: ...
