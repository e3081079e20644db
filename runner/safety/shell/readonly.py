"""``read_only(command)``: does a shell command only read? (workdir checkpoints: runner/run/checkpoints.py)

True only when every simple command in the line, substitutions included, is a command from a
short list of readers (``ls``, ``cat``, ``grep``, ``git status``, ``find`` without actions...)
whose output goes nowhere but the tool result or ``/dev/null``. Anything else, anything this
cannot read (variables as command names, functions, loops, ``>(...)``, text it cannot parse),
counts as a command that may change files: the answer errs towards a checkpoint, never against
one. It is not a safety verdict (``classify`` is): a read-only command can still be dangerous.
"""

from __future__ import annotations

from runner.safety.shell.normalize import normalize
from runner.safety.shell.split import parse
from runner.safety.shell.syntax import Command, ParseBudget, ParseError, Redirect, Script

MAX_CHARS = 16 * 1024  # longer command lines are not examined: they count as changing files

# commands that write no file whatever their arguments (redirects are checked apart)
READERS = frozenset(
    {
        "cat", "head", "tail", "grep", "egrep", "fgrep", "wc", "ls", "stat", "diff", "cmp", "md5sum", "sha1sum",
        "sha256sum", "sha512sum", "b2sum", "cksum", "test", "[", "echo", "printf", "readlink", "realpath",
        "basename", "dirname", "du", "df", "nl", "od", "hexdump", "strings", "jq", "pwd", "true", "false", "cd",
        "type", "which", "whoami", "id", "uname", "printenv", "sleep", "cut", "tr", "tac", "rev", "fold", "comm",
        "join", "paste", "seq", "column", "ps", "free", "uptime", ":", "rg",
    }
)  # fmt: skip
GIT_READERS = frozenset({"status", "diff", "log", "show", "blame", "ls-files", "grep", "rev-parse", "cat-file"})
FIND_ACTIONS = frozenset({"-delete", "-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprint0", "-fprintf", "-fls"})
KEYWORDS = frozenset({"if", "then", "else", "elif", "do", "while", "until", "!", "{", "time"})
CLOSERS = frozenset({"fi", "done", "}", "esac"})
_WRITES = frozenset({">", ">>", ">|", "<>", "&>", "&>>"})
_QUIET = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})


def read_only(command: str) -> bool:
    """Does ``command`` only read (see the module docstring)? Pure; never raises on any ``str``."""
    if len(command) > MAX_CHARS:
        return False
    text = normalize(command)
    try:
        script = parse(text, ParseBudget(4 * len(text) + 4096))
    except (ParseError, RecursionError):
        return False
    return _script(script)


def _script(script: Script) -> bool:
    if script.functions:
        return False
    return all(_command(cmd) for pipeline in script.pipelines for cmd in pipeline.commands)


def _command(cmd: Command) -> bool:
    if not all(_redirect(r) for r in cmd.redirects):
        return False
    for word in cmd.words:
        for sub in word.subs:
            if (sub.kind == "proc" and not sub.raw.startswith("<(")) or not _script(sub.script):
                return False
    words = [w.value for w in cmd.words]
    while words and words[0] in KEYWORDS:
        words = words[1:]
    if not words:
        return not cmd.words or cmd.words[0].value in KEYWORDS  # a bare `then`; a redirect alone writes
    if len(words) == 1 and words[0] in CLOSERS:
        return True
    return _reader([w.value for w in cmd.words][len(cmd.words) - len(words) :])


def _redirect(r: Redirect) -> bool:
    if r.body_subs and not all(_script(s.script) for s in r.body_subs):
        return False
    if r.op in _WRITES:
        return r.target.value in _QUIET
    if r.op == ">&":
        return r.target.value.isdigit() or r.target.value == "-" or r.target.value in _QUIET
    return True


def _reader(words: list[str]) -> bool:
    first = words[0]
    if any(c in first for c in "$`=*?[/"):
        return False  # a variable, an assignment, a glob or a program by path: not known
    name = first
    if name == "git":
        sub = next((w for w in words[1:] if not w.startswith("-")), "")
        options = [w for w in words[1:] if w.startswith("-")]
        return sub in GIT_READERS and not any(o.startswith(("--output", "-o", "-c", "-C")) for o in options)
    if name == "find":
        return not any(w in FIND_ACTIONS for w in words[1:])
    if name == "rg":
        return not any(w.startswith("--pre") for w in words[1:])  # --pre runs a program on each file
    return name in READERS
