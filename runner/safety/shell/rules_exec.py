"""Option values that execute: programs that run a command given in an option or an
argument that does not look like one (``git -c core.pager=CMD``, ``tar --to-command=CMD``,
``vim -c ':!CMD'``, ``less '+!CMD'``, ``man -P CMD``, ``script -c CMD``, ``expect -c``).

Such a value is shell code: it is classified recursively (so a visible hardline payload
is hardline), and hiding a command there is itself at least dangerous unless the value
is a plain program name with plain options (``tar -I zstd``, ``rsync -e 'ssh -p 22'``).
"""

from __future__ import annotations

import re

from runner.safety.shell.common import Rule, Sink, parse_args
from runner.safety.shell.unwrap import SHELLS, command_name

_PLAIN_PROGRAM = re.compile(r"[\w./+-]+(?:\s+[\w./+=:,@%-]+)*")
_CODE_RUNNERS = frozenset(
    {*SHELLS, "python", "python3", "perl", "ruby", "node", "php", "lua", "eval", "exec", "env", "xargs", "sudo",
     "busybox", "source", ".", "script", "expect", "awk", "gawk", "mawk", "nawk", "find", "vim", "vi", "nvim"}
)  # fmt: skip


def runs_code(argv: tuple[str, ...]) -> bool:
    """Is ``argv`` a program that runs code it is given (a shell, an interpreter, eval)?"""
    if not argv:
        return False
    name = command_name(argv[0]).rstrip("0123456789.")
    return name in _CODE_RUNNERS


def exec_value(value: str, sink: Sink, what: str, always: bool = False) -> None:
    """``value`` is run as a shell command by ``what``: classify it, and flag it unless it
    is a plain program with plain arguments that runs no other code."""
    sink.run_script(value)
    words = value.split()
    if always or not _PLAIN_PROGRAM.fullmatch(value.strip()) or runs_code(tuple(words)):
        sink.danger(f"{what} runs a command")


# ---------------------------------------------------------------- editors and pagers

# Ex commands that only move, search, set options or quit.
_EX_BENIGN = re.compile(
    r"(?:\d+|\$|[/?][^|]*|(?:set?|setl(?:ocal)?|sy(?:ntax)?|filetype|colo(?:rscheme)?|noh(?:lsearch)?"
    r"|q|qa|q!|qa!|wq|wqa|x|xa|w|wa|e!?|norm(?:al)?!?\s+[\w\s]*)(?:\s+[^!|`]*)?)"
)
_EDITORS = frozenset({"vim", "vi", "nvim", "ex", "view", "vimdiff", "gvim", "rvim", "evim", "nview"})


def editor(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """``vim -c CMD``, ``--cmd CMD``, ``+CMD``: ex commands; ``!`` runs a shell command."""
    commands: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-c", "--cmd") and i + 1 < len(args):
            commands.append(args[i + 1])
            i += 2
            continue
        if arg.startswith("+") and len(arg) > 1:
            commands.append(arg[1:])
        elif arg.startswith("-c") and len(arg) > 2:
            commands.append(arg[2:])
        i += 1
    for command in commands:
        ex_command(command, sink, name)


def ex_command(command: str, sink: Sink, name: str) -> None:
    text = command.strip().lstrip(":").strip()
    for prefix in ("silent!", "silent", "sil!", "sil", "exe", "execute"):
        if text.startswith(prefix + " "):
            text = text[len(prefix) :].strip()
    if _EX_BENIGN.fullmatch(text):
        return
    if "!" in text:
        exec_value(text[text.index("!") + 1 :], sink, f"{name} ! escape", always=True)
    else:
        sink.danger(f"{name} runs editor commands ({text[:40]})")


def pager(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """``less '+!CMD'``: start-up commands of a pager, where ``!`` runs a shell command."""
    for arg in args:
        if arg.startswith("+") and "!" in arg:
            exec_value(arg[arg.index("!") + 1 :], sink, f"{name} ! escape", always=True)


def man(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """``man -P CMD`` / ``--pager=CMD`` / ``-H CMD`` / ``--html=CMD`` run CMD."""
    parsed = parse_args(args, with_value="PHMSsLmpCRE", long_with_value="--pager --html --manpath --sections")
    for key in ("-P", "--pager", "-H", "--html"):
        value = parsed.values.get(key)
        if value:
            exec_value(value, sink, f"man {key}")


def script(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """``script -c CMD`` runs CMD in a new pseudo-terminal."""
    parsed = parse_args(args, with_value="cBEIOTmo", long_with_value="--command --log-in --log-out --log-io")
    value = parsed.values.get("-c") or parsed.values.get("--command")
    if value is not None:
        exec_value(value, sink, "script -c", always=True)


_TCL_RUN = re.compile(r"(?:^|[;\n\[{])\s*(?:spawn|exec|system)\s+([^;\n\]}]*)")
_TCL_SEND = re.compile(r"\bsend\s+(?:--\s+)?\"((?:[^\"\\]|\\.){0,4000}+)\"")


def expect(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """``expect -c 'spawn CMD; send "CMD\\r"'``: Tcl that starts programs and types into them."""
    parsed = parse_args(args, with_value="cfbD")
    code = parsed.values.get("-c")
    if code is None:
        return
    sink.danger("expect -c runs a script")
    for m in _TCL_RUN.finditer(code):
        sink.run_script(m.group(1).replace("{", " ").replace("}", " "))
    for m in _TCL_SEND.finditer(code):
        sink.run_script(m.group(1).replace("\\r", "\n").replace("\\n", "\n"))


# ---------------------------------------------------------------- awk

_AWK_STRING = r"\"((?:[^\"\\\n]|\\.){0,4000}+)\""
_AWK_TO_COMMAND = re.compile(r"\|&?\s*" + _AWK_STRING)  # print ... | "CMD"
_AWK_FROM_COMMAND = re.compile(_AWK_STRING + r"\s*\|&?\s*getline")  # "CMD" | getline
_AWK_PRINTED = re.compile(r"print[f]?\s*\(?\s*" + _AWK_STRING)
_AWK_RUNS = re.compile(r"\bsystem\s*\(|\|&?\s*getline|\|&?\s*[\"\w(]")


def awk_program(program: str, sink: Sink) -> None:
    """``system(...)``, ``"CMD" | getline`` and ``print | "CMD"`` run commands."""
    if not _AWK_RUNS.search(program):
        return
    sink.danger("awk runs a command")
    for m in _AWK_FROM_COMMAND.finditer(program):
        sink.run_script(m.group(1))
    targets = [m.group(1) for m in _AWK_TO_COMMAND.finditer(program)]
    for target in targets:
        sink.run_script(target)
        if runs_code(tuple(target.split())):  # print "TEXT" | "sh": TEXT is the script
            for printed in _AWK_PRINTED.finditer(program):
                sink.run_script(printed.group(1).replace("\\n", "\n"))


RULES: dict[str, Rule] = {
    **{e: editor for e in _EDITORS},
    **{p: pager for p in ("less", "more", "most")},
    "man": man,
    "script": script,
    "expect": expect,
}
