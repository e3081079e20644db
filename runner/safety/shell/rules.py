"""The rule registry: which check runs for which command name, plus the checks every
command gets (arguments pointing at metadata services, running a downloaded file).

Commands whose arguments are only text (``echo``, ``grep``, ``git commit -m``) are
"inert": their arguments are never scanned, so ``grep 169.254.169.254 notes.txt`` and
``echo "rm -rf /"`` stay safe. Text only becomes a command when something executes it.
"""

from __future__ import annotations

from runner.safety.shell import (
    rules_container,
    rules_exec,
    rules_fs,
    rules_net,
    rules_run,
    rules_shell,
    rules_sys,
    rules_written,
)
from runner.safety.shell.common import NO_TRAITS, Rule, Sink, Traits

RULES: dict[str, Rule] = {
    **rules_fs.RULES,
    **rules_net.RULES,
    **rules_sys.RULES,
    **rules_exec.RULES,
    **rules_shell.RULES,
    **rules_run.RULES,
    **rules_container.RULES,
    **rules_written.RULES,
}

# Programs that read a list of shell commands in another format on stdin (Traits.stdin_exec).
STDIN_COMMANDS = {"crontab": rules_run.crontab_commands, "make": rules_written.makefile_commands}

INERT = frozenset(
    {"echo", "printf", "grep", "egrep", "fgrep", "zgrep", "rg", "ag", "ack", "true", "false", ":",
     "test", "[", "[[", "man", "help", "type", "which", "whatis", "apropos", "logger", "wc", "jq",
     "yq", "cut", "head", "tail", "less", "more", "cat", "diff", "sort", "uniq", "tr", "awk"}
)  # fmt: skip
_INERT_GIT = frozenset({"commit", "tag", "log", "grep", "notes", "show", "stash", "shortlog"})


def run_rules(argv: tuple[str, ...], sink: Sink) -> Traits:
    """Apply the rule for ``argv[0]`` (after unwrapping) and the generic checks."""
    name = rules_net.canonical_name(argv[0])
    args = argv[1:]
    rule = RULES.get(name)
    if rule is None and name.startswith("mkfs"):
        rule = rules_fs.disk_tool
    traits = rule(name, args, sink) if rule is not None else None
    if not _inert(name, args):
        rules_net.scan_args(args, sink)
    if "/" in argv[0]:
        rules_written.run_file(argv[0], sink, "shell")
    if argv[0].startswith(("$(", "`")):  # the output of a command is run as a command
        traits = Traits(shellish=True) if traits is None else traits
    return traits or NO_TRAITS


def _inert(name: str, args: tuple[str, ...]) -> bool:
    if name in INERT:
        return True
    if name == "git":
        sub = next((a for a in args if not a.startswith("-")), "")
        return sub in _INERT_GIT
    return False
