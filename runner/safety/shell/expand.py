"""Static expansion: what we can know about a command's words without running anything.

Obfuscation usually hides a command name or a path behind an expansion the shell
performs: ``x=rm; $x -rf /``, ``$(echo rm) -rf /``, ``{rm,-rf,/}``, ``IFS=,; c=rm,-rf,/; $c``.
We replay the expansions whose result is certain from the text alone: variables assigned
earlier in the same command string (split on ``IFS`` when one was assigned), substitutions
whose output the classifier could work out (``echo``, ``printf``, decoders of known text),
and brace expansion (complete, capped: see ``braces.py``). Everything else stays literal,
``$name`` and ``$(...)`` included, and the classifier treats such a word as unknown.
"""

from __future__ import annotations

import re

from runner.safety.shell.braces import brace_expand
from runner.safety.shell.syntax import Redirect, Word

ASSIGNMENT = re.compile(r"^([A-Za-z_]\w*)\+?=(.*)$", re.S)
ELEMENT = re.compile(r"^[A-Za-z_]\w*\[[^\]]*\]\+?=", re.S)  # an array element: a[1]=x
_VAR_REF = re.compile(r"\$(?:\{([A-Za-z_]\w*)\}|([A-Za-z_]\w*))")
UNKNOWN = re.compile(r"\$[({A-Za-z_]|`")  # an expansion still unresolved in a word

# Words that structure a script but run nothing themselves.
_KEYWORDS = frozenset(
    {"!", "{", "}", "if", "then", "else", "elif", "fi", "while", "until", "do", "done", "esac",
     "coproc", "(", ")"}
)  # fmt: skip
# Commands whose words are all data: "for x in a b c", "case $x in".
_DATA_ONLY = frozenset({"for", "select", "case", "in"})


def expand(
    words: tuple[Word, ...], variables: dict[str, str], outputs: dict[str, str] | None = None
) -> tuple[str, ...]:
    """The argument vector the shell would build, as far as it is statically certain.

    ``outputs`` maps the source text of a substitution (``$(echo rm)``) to its known output."""
    out: list[str] = []
    for w in words:
        value = substituted(w, outputs) if w.subs and outputs else w.value
        changed = value is not w.value
        if variables and "$" in value:
            expanded = _VAR_REF.sub(lambda m: variables.get(m.group(1) or m.group(2), m.group()), value)
            changed = changed or expanded != value
            value = expanded
        if changed and not w.quoted:
            out.extend(_split(value, variables.get("IFS")))  # unquoted expansion: word splitting
            continue
        if "{" in value and (not w.quoted or w.braces):
            out.extend(x for x in brace_expand(value) if x or w.quoted)  # bash drops empty words
            continue
        out.append(value)
    return tuple(out)


def substituted(word: Word, outputs: dict[str, str] | None) -> str:
    """``word``'s value with each substitution whose output is known replaced by it."""
    value = word.value
    if not outputs:
        return value
    for sub in word.subs:
        text = outputs.get(sub.raw)
        if text is not None and sub.kind == "cmd":
            value = value.replace(sub.raw, text.rstrip("\n"), 1)
    return value


def _split(value: str, ifs: str | None) -> list[str]:
    """Field splitting. With an assigned ``IFS`` we split on its characters *and* on
    blanks: over-splitting can only make more text look like a command, never less."""
    if ifs:
        extra = "".join(c for c in ifs if not c.isspace())
        if extra:
            value = value.translate({ord(c): " " for c in extra})
    fields = value.split()
    return [f for field in fields for f in (brace_expand(field) if "{" in field else [field]) if f]


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


def stdin_text(redirects: tuple[Redirect, ...], outputs: dict[str, str] | None = None) -> str | None:
    """The text a command reads on stdin when a here-document, a here-string or a process
    substitution with known output (``sh < <(echo ...)``) gives it."""
    text = None
    for r in redirects:
        if r.op in ("<<", "<<-"):
            text = r.body
        elif r.op == "<<<":
            text = substituted(r.target, outputs)
        elif r.op == "<" and outputs and r.target.subs and r.target.value.startswith("<("):
            text = outputs.get(r.target.value)
    return text
