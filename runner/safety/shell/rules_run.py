"""Commands that run other commands: later (``at``, ``batch``, ``crontab``), many times (GNU
``parallel``, ``sem``, ``hyperfine``, ``entr``), or in another session or in the background
(``screen``, ``tmux``, ``dtach``, ``start-stop-daemon``).

What they run is a command and is classified as one, with the arguments it will get.
``at``/``batch`` hand the job to ``atd``, which runs it outside the run (and outside any
sandbox) after the run ended: scheduling is dangerous whatever the job, and hardline when
the job is; the job is read from stdin (classified when an ``echo``, here-string or
here-document shows it) or from ``-f FILE`` (classified when written in the same command).
Prefix runners that only take options before the command (``daemonize``, ``xvfb-run``)
are peeled like ``nohup`` in ``unwrap.py``.
"""

from __future__ import annotations

import re
import shlex
from itertools import islice, product

from runner.safety.shell.common import Rule, Sink, Traits, has_long, parse_args
from runner.safety.shell.rules_written import run_file, run_written

UNKNOWN_INPUT = "${parallel_input}"  # an argument read from a file: anything
_MAX_RUNS = 64  # argument combinations examined per command

# ---------------------------------------------------------------- at, batch


def at(name: str, args: tuple[str, ...], sink: Sink) -> Traits | None:
    """``at TIME`` / ``batch``: schedule the shell commands on stdin or in ``-f FILE``."""
    parsed = parse_args(args, with_value="qft")
    if {"l", "d", "r", "c", "V"} & parsed.short:
        return None  # lists, removes or prints jobs
    sink.danger(f"{name} schedules commands to run later, outside the run")
    script = parsed.values.get("-f")
    if script is not None:
        run_file(script, sink, "shell")
        return None
    return Traits(stdin_exec="shell")


def crontab(name: str, args: tuple[str, ...], sink: Sink) -> Traits | None:
    """``crontab FILE`` / ``crontab -`` (stdin) installs jobs: a change, and each job's
    command (a line after its five time fields) is classified."""
    parsed = parse_args(args, with_value="u")
    if "r" in parsed.short:
        sink.danger("crontab -r (removes all cron jobs)")
        return None
    if {"l", "e", "V", "T"} & parsed.short or has_long(parsed, "--help", "--version"):
        if "e" in parsed.short:
            sink.danger("crontab change")
        return None
    sink.danger("crontab change")
    table = parsed.operands[0] if parsed.operands else "-"
    if table in ("-", "/dev/stdin"):
        return Traits(stdin_exec="crontab")
    run_written(table, sink, "a crontab", lambda text: _run_all(crontab_commands(text), sink))
    return None


_CRON_LINE = re.compile(r"^\s*(?:@\w+|(?:\S+\s+){5})(.*)$")
_CRON_VARIABLE = re.compile(r"^\s*[A-Za-z_]\w*\s*=")


def crontab_commands(text: str) -> list[str]:
    """The shell commands of a crontab's job lines (``%`` starts the job's stdin: read as
    more commands, which can only flag more)."""
    commands = []
    for line in text.split("\n"):
        if not line.strip() or line.lstrip().startswith("#") or _CRON_VARIABLE.match(line):
            continue
        m = _CRON_LINE.match(line)
        if m and m.group(1).strip():
            commands.append(m.group(1).replace("%", "\n"))
    return commands


def _run_all(commands: list[str], sink: Sink) -> None:
    for command in commands:
        sink.run_script(command)


# ---------------------------------------------------------------- parallel

_PARALLEL_VALUE = "jPSadEInNLsC"
_PARALLEL_LONG = (
    "--jobs --max-procs --sshlogin --sshloginfile --arg-file --delimiter --eof --replace --max-args "
    "--max-lines --max-chars --joblog --results --tmpdir --workdir --wd --delay --timeout --retries --halt "
    "--memfree --load --colsep --tag-string --tagstring --basefile --bf --return --transfer-file --tf --env "
    "--block --blocksize --recstart --recend --header --limit --nice --seqreplace --id"
)
_SEPARATORS = frozenset({":::", ":::+", "::::", "::::+"})
_REPLACEMENT = re.compile(r"\{(?:(\d*)(?:\.|/|//|/\.)?|#|%|=(?:[^=]|=(?!\}))*=)\}")
_NUMBERED = re.compile(r"\{(\d+)\}")


def parallel(name: str, args: tuple[str, ...], sink: Sink) -> Traits | None:
    """``parallel [OPTS] [CMD ...] ::: ARGS``: CMD (a shell command line) runs once per
    argument, with ``{}`` (``{.}``, ``{1}``, ...) replaced or the argument appended; with no
    CMD each argument is itself a command. Arguments from ``::::`` files or ``-a`` are
    unknown; without ``:::`` they come from stdin, like ``xargs``."""
    head, groups = _split_sources(args)
    parsed = parse_args(head, with_value=_PARALLEL_VALUE, long_with_value=_PARALLEL_LONG, stop_at_operand=True)
    if "{=" in " ".join(parsed.operands):
        sink.danger("parallel {= =} runs Perl code")
    template, marker = _parallel_template(parsed.operands, parsed.values.get("-I") or parsed.values.get("--replace"))
    if "--pipe" in parsed.long or "--pipepart" in parsed.long:
        sink.run_script(template.replace(marker, ""))  # stdin is data for one command line
        return None
    if "-a" in parsed.values or "--arg-file" in parsed.values:
        groups.append([UNKNOWN_INPUT])
    if not groups:
        sink.run_script(_fill(template, marker, [UNKNOWN_INPUT]))
        return Traits(xargs=(("sh", "-c", _NUMBERED.sub(marker, template)), marker))
    for combination in islice(product(*groups), _MAX_RUNS):
        sink.run_script(_fill(template, marker, list(combination)))
    return None


def _split_sources(args: tuple[str, ...]) -> tuple[tuple[str, ...], list[list[str]]]:
    """The options and command before the first ``:::``/``::::``, and the argument groups."""
    i = next((k for k, a in enumerate(args) if a in _SEPARATORS), len(args))
    groups: list[list[str]] = []
    for arg in args[i:]:
        if arg in _SEPARATORS:
            groups.append([UNKNOWN_INPUT] if arg.startswith("::::") else [])
        elif groups[-1] != [UNKNOWN_INPUT]:
            groups[-1].append(arg)
    return args[:i], [g for g in groups if g]


def _parallel_template(command: tuple[str, ...], replace: str | None) -> tuple[str, str]:
    """The command line with ``{N}`` for the N-th argument and one marker for all of them
    (every other replacement string), and the marker."""
    marker = replace or "{}"
    text = " ".join(command) if command else marker
    if replace is None:
        text = _REPLACEMENT.sub(lambda m: "{" + m.group(1) + "}" if m.group(1) else marker, text)
    if marker not in text and not _NUMBERED.search(text):
        text = f"{text} {marker}"
    return text, marker


def _fill(template: str, marker: str, values: list[str]) -> str:
    """``{N}`` gets the N-th value, the marker all of them (space-separated); parallel
    quotes them, unless the whole command is the argument."""
    if template.strip() == marker:
        return " ".join(values)
    quoted = [shlex.quote(v) for v in values]

    def nth(m: re.Match[str]) -> str:
        n = int(m.group(1))
        return quoted[n - 1] if 0 < n <= len(quoted) else ""

    return _NUMBERED.sub(nth, template).replace(marker, " ".join(quoted))


def sem(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """``sem [OPTS] CMD ...`` (``parallel --semaphore``): the command line runs once."""
    parsed = parse_args(args, with_value=_PARALLEL_VALUE, long_with_value=_PARALLEL_LONG, stop_at_operand=True)
    if parsed.operands:
        sink.run_script(" ".join(parsed.operands))


# ---------------------------------------------------------------- repeaters


def hyperfine(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """Every operand, and ``--prepare``/``--setup``/``--cleanup``/``--conclude``, is a
    shell command; ``-L NAME A,B`` puts each value in for ``{NAME}``."""
    commands: list[str] = []
    params: list[tuple[str, list[str]]] = []
    i = 0
    while i < len(args):
        arg, rest = args[i], args[i + 1 :]
        if arg in ("-L", "--parameter-list") and len(rest) >= 2:
            params.append((rest[0], rest[1].split(",")))
            i += 3
        elif arg in _HYPERFINE_COMMANDS and rest:
            commands.append(rest[0])
            i += 2
        elif arg in ("-P", "--parameter-scan"):
            i += 4
        else:
            i += 2 if arg in _HYPERFINE_VALUE else 1
            if not arg.startswith("-"):
                commands.append(arg)
    for command in commands:
        for text in _with_parameters(command, params):
            sink.run_script(text)


_HYPERFINE_COMMANDS = frozenset({"-p", "--prepare", "-s", "--setup", "-c", "--cleanup", "--conclude"})
_HYPERFINE_VALUE = frozenset(
    {"-w", "--warmup", "-m", "--min-runs", "-M", "--max-runs", "-r", "--runs", "-D", "--parameter-step-size",
     "-S", "--shell", "--style", "-u", "--time-unit", "--export-asciidoc", "--export-csv", "--export-json",
     "--export-markdown", "--export-orgmode", "--output", "-n", "--command-name", "--sort", "--input"}
)  # fmt: skip


def _with_parameters(command: str, params: list[tuple[str, list[str]]]) -> list[str]:
    """The command once per combination of parameter values it uses."""
    texts = [command]
    for key, values in params:
        placeholder = "{" + key + "}"
        if placeholder in command:
            texts = [t.replace(placeholder, v) for t in texts for v in values[:8]][:_MAX_RUNS]
    return texts


def entr(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """``entr [-acdnprz] CMD ARGS`` reruns CMD when a file changes; ``-s 'TEXT'`` runs TEXT in a shell."""
    parsed = parse_args(args, stop_at_operand=True)
    if not parsed.operands:
        return
    if "s" in parsed.short:
        sink.run_script(parsed.operands[0])
    else:
        sink.run_argv(parsed.operands)


# ---------------------------------------------------------------- sessions and daemons

_SCREEN_VALUE_LETTERS = "SctpehTsX"  # a cluster ending in one of these takes the next word (-dmS NAME)
_SCREEN_ATTACH = frozenset({"-r", "-R", "-x", "-ls", "-list", "-wipe", "-v", "-Q"})


def screen(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """``screen [-dm] [-S NAME] CMD ARGS`` runs CMD in a new session; ``screen -X stuff
    'TEXT'`` types TEXT into one (a newline runs it)."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        arg = args[i]
        if arg.endswith("X"):
            _screen_command(args[i + 1 :], sink)
            return
        if arg in _SCREEN_ATTACH:
            return
        i += 2 if arg == "-Logfile" or arg[-1] in _SCREEN_VALUE_LETTERS else 1
    if i < len(args):
        sink.run_argv(args[i:])


def _screen_command(words: tuple[str, ...], sink: Sink) -> None:
    if words[:1] == ("stuff",) and len(words) > 1:
        sink.run_script(_typed(words[1]))
    elif words[:1] == ("screen",):
        screen("screen", words[1:], sink)


def _typed(keys: str) -> str:
    """Text typed into a terminal, with the escapes screen and tmux accept for Enter."""
    return keys.replace("^M", "\n").replace("\\r", "\n").replace("\\n", "\n").replace("\\015", "\n")


def _options(spaced: str) -> frozenset[str]:
    return frozenset(spaced.split())


# tmux commands whose last words are a shell command, and their options that take a value.
_TMUX_SHELL: dict[str, frozenset[str]] = {
    "new-session": _options("-c -e -f -F -n -s -t -x -y"),
    "new-window": _options("-c -e -F -n -t"),
    "split-window": _options("-c -e -F -l -p -t"),
    "respawn-pane": _options("-c -e -t"),
    "respawn-window": _options("-c -e -t"),
    "run-shell": _options("-d -t -c"),
    "display-popup": _options("-b -c -d -e -h -s -S -t -T -w -x -y"),
    "pipe-pane": frozenset({"-t"}),
    "if-shell": frozenset({"-t"}),
}
_TMUX_ALIASES = {"new": "new-session", "neww": "new-window", "splitw": "split-window", "respawnp": "respawn-pane",
                 "respawnw": "respawn-window", "run": "run-shell", "popup": "display-popup", "pipep": "pipe-pane",
                 "if": "if-shell", "send": "send-keys"}  # fmt: skip
_TMUX_GLOBAL_VALUE = frozenset({"-L", "-S", "-f", "-T"})
_KEY_NAMES = {"Enter": "\n", "C-m": "\n", "KPEnter": "\n", "C-j": "\n", "Space": " ", "Tab": " "}


def tmux(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """``tmux new -d 'CMD'``, ``split-window CMD``, ``run-shell CMD``, ``-c CMD``: a shell
    command; ``send-keys 'TEXT' Enter`` types TEXT into a pane. Commands separated by ``;``."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        if args[i] == "-c" and i + 1 < len(args):
            sink.run_script(args[i + 1])
            return
        i += 2 if args[i] in _TMUX_GLOBAL_VALUE else 1
    command: list[str] = []
    for word in (*args[i:], ";"):
        if word in (";", "\\;"):
            _tmux_command(command, sink)
            command = []
        else:
            command.append(word)


def _tmux_command(words: list[str], sink: Sink) -> None:
    if not words:
        return
    verb = _TMUX_ALIASES.get(words[0], words[0])
    if verb == "send-keys":
        keys = _tmux_operands(words[1:], frozenset({"-t", "-N"}))
        sink.run_script("".join(_KEY_NAMES.get(k, k) for k in keys))
    elif verb in _TMUX_SHELL:
        operands = _tmux_operands(words[1:], _TMUX_SHELL[verb])
        if operands:
            sink.run_script(operands[0] if verb == "if-shell" else " ".join(operands))


def _tmux_operands(words: list[str], with_value: frozenset[str]) -> list[str]:
    i = 0
    while i < len(words) and words[i].startswith("-") and words[i] != "-":
        i += 2 if words[i] in with_value else 1
    return words[i:]


def dtach(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """``dtach -n|-c|-A SOCKET [-e C] [-r M] [-Ez] CMD ARGS``; ``-a SOCKET`` only attaches."""
    if len(args) < 3 or args[0] not in ("-n", "-c", "-A", "-N"):
        return
    i = 2
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in ("-e", "-r") else 1
    if i < len(args):
        sink.run_argv(args[i:])


def start_stop_daemon(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """``start-stop-daemon --start --exec PATH -- ARGS`` (``--startas`` wins over ``--exec``)."""
    parsed = parse_args(args, with_value="xapnucrdNPIkRsgO", long_with_value=_SSD_LONG)
    if not ({"S"} & parsed.short or "--start" in parsed.long):
        return
    program = next((parsed.values[k] for k in ("-a", "--startas", "-x", "--exec") if k in parsed.values), None)
    if program is not None:
        sink.run_argv((program, *parsed.operands))


_SSD_LONG = (
    "--exec --startas --pidfile --name --user --chuid --chroot --chdir --nicelevel --procsched --iosched "
    "--umask --retry --signal --group --output --remove-pidfile --make-pidfile --ppid"
)

RULES: dict[str, Rule] = {
    "at": at,
    "batch": at,
    "crontab": crontab,
    "parallel": parallel,
    "sem": sem,
    "hyperfine": hyperfine,
    "entr": entr,
    "screen": screen,
    "tmux": tmux,
    "dtach": dtach,
    "start-stop-daemon": start_stop_daemon,
}
