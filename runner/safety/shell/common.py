"""What every rule module shares: the sink rules report to, the traits they return, and
option parsing that understands short-option clusters (``-rf``) and ``--``.

Rules are plain functions ``(name, args, sink) -> Traits | None``. They never recurse
themselves: when a command runs another command (``find -exec``) or shell text
(``python -c "os.system('...')"``) they hand it to the sink, which owns depth limits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from runner.safety.shell.paths import is_block_device, is_sysrq, kernel_write, normalize_path, sensitive_write


class Sink(Protocol):
    """Where rules report findings; implemented by the classifier's context."""

    cwd: str | None  # working directory when a ``cd`` made it known, else None
    downloaded: set[str]  # base names of files fetched earlier in the same command
    written: dict[str, str | None]  # files written earlier in the same command: their text, if known

    def hard(self, reason: str) -> None:
        """Record a hardline finding: never runs."""

    def danger(self, reason: str) -> None:
        """Record a finding that needs a policy decision."""

    def run_argv(self, argv: tuple[str, ...]) -> None:
        """Examine a command this command will run (``find -exec``, ``xargs``)."""

    def run_script(self, text: str) -> None:
        """Examine shell text this command will run (``bash -c``, ``os.system``)."""

    def run_in_container(self, argv: tuple[str, ...], host_exposed: bool) -> None:
        """Examine a command a container runs. Unless ``host_exposed`` (a host mount of a
        system folder, ``--privileged``, ...), only the container's own files and
        processes are in reach: a hardline finding (other than a fork bomb) counts as
        dangerous."""


@dataclass(frozen=True)
class Traits:
    """What a command does with its standard streams, for the pipeline checks."""

    downloads: bool = False  # fetches from the network (curl, wget)
    decodes: bool = False  # turns encoded input into something else (base64 -d, xxd -r)
    transform: str | None = None  # "base64" | "rev": a decoding we can replay on known text
    stdin_exec: str | None = None  # "shell" | "interpreter" | "crontab" | "make": executes what is on stdin
    shellish: bool = False  # executes its arguments as code (shells, eval, source, python)
    socket: bool = False  # raw network socket (nc, socat, telnet)
    interactive: bool = False  # an interactive shell (bash -i)
    stdout_text: str | None = None  # known output (echo, printf, cat of a here-document)
    sql: bool = False  # a database client that executes SQL from stdin
    lang: str | None = None  # "shell" | "interpreter": runs the files it is given as code
    xargs: tuple[tuple[str, ...], str | None] | None = None  # xargs: command template, -I string
    tees: tuple[str, ...] = ()  # files that receive a copy of stdin (tee)


NO_TRAITS = Traits()

Rule = Callable[[str, tuple[str, ...], Sink], "Traits | None"]


@dataclass(frozen=True)
class Parsed:
    """Options and operands of an argument list."""

    long: tuple[str, ...]  # --long options, with any "=value" kept attached
    short: frozenset[str]  # letters of all short-option clusters
    values: dict[str, str]  # option -> value, for options that take one
    operands: tuple[str, ...]


def parse_args(
    args: Iterable[str], with_value: str = "", long_with_value: str = "", stop_at_operand: bool = False
) -> Parsed:
    """Split ``args`` into options and operands.

    ``with_value`` lists short letters that take a value (``"otu"``): in a cluster such a
    letter ends the cluster and takes the rest of it or the next word (``-fo out``,
    ``-oout``). ``long_with_value`` lists long options (space separated) that take the
    next word unless written ``--opt=value``. After ``--`` everything is an operand.
    """
    shorts: set[str] = set()
    longs: list[str] = []
    values: dict[str, str] = {}
    operands: list[str] = []
    long_values = frozenset(long_with_value.split())
    items = list(args)
    i = 0
    while i < len(items):
        arg = items[i]
        i += 1
        if arg == "--":
            operands.extend(items[i:])
            break
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            longs.append(arg)
            if eq:
                values[name] = value
            elif name in long_values and i < len(items):
                values[name] = items[i]
                i += 1
            continue
        if len(arg) > 1 and arg[0] == "-":
            for k, letter in enumerate(arg[1:], start=1):
                shorts.add(letter)
                if letter in with_value:
                    rest = arg[k + 1 :]
                    if rest:
                        values["-" + letter] = rest
                    elif i < len(items):
                        values["-" + letter] = items[i]
                        i += 1
                    break
            continue
        operands.append(arg)
        if stop_at_operand:
            operands.extend(items[i:])
            break
    return Parsed(tuple(longs), frozenset(shorts), values, tuple(operands))


def has_long(parsed: Parsed, *names: str) -> bool:
    return any(opt.partition("=")[0] in names for opt in parsed.long)


MAX_WRITTEN = 256 * 1024
TOO_LARGE = "\x00(a script too large to examine)"  # compared by identity: written text beyond MAX_WRITTEN


def record_write(path: str, sink: Sink, text: str | None = None, keep: bool = False) -> None:
    """Remember that the command line writes ``path``, with ``text`` when it is known (see
    ``rules_written.py``). ``keep``: a file already written keeps its text (``touch``)."""
    key = normalize_path(path, sink.cwd)
    if not (keep and key in sink.written):
        sink.written[key] = text


def written(path: str, sink: Sink) -> str | None:
    """The known text of a file written earlier in the same command line, else None."""
    return sink.written.get(normalize_path(path, sink.cwd)) if sink.written else None


def check_write(path: str, sink: Sink, how: str = "write") -> None:
    """Report a write to ``path``: block devices and the sysrq trigger are hardline;
    configuration, keys, secrets files and kernel settings (``/proc/sys``, ``/sys``) need a
    decision."""
    if is_block_device(path):
        sink.hard(f"{how} to block device {path}")
    elif is_sysrq(path, sink.cwd):
        sink.hard("write to /proc/sysrq-trigger (reboot or crash)")
    else:
        reason = sensitive_write(path, sink.cwd) or kernel_write(path, sink.cwd)
        if reason:
            sink.danger(reason)
