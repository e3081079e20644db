"""Peel command wrappers so the rules see the command that actually runs.

``sudo -u root nice -n 5 timeout 10 rm -rf /`` runs ``rm -rf /``. Each wrapper has its
own options, some of which take a value (``-u root``), some positional arguments before
the command (``timeout 10``), and some hand a whole *string* to a shell (``bash -c``,
``su -c``, ``eval``, ``ssh host CMD``, ``watch CMD``, ``env -S``). ``unwrap`` does one
layer; the classifier loops until nothing is left to peel. Pure: no state, no I/O.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass

SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "ash", "mksh", "yash", "rbash", "fish", "posh"})


@dataclass(frozen=True)
class Step:
    """The result of peeling one wrapper."""

    argv: tuple[str, ...]  # what the wrapper runs next (empty: nothing more to examine)
    reasons: tuple[str, ...] = ()  # why the wrapper itself needs a decision (sudo)
    payloads: tuple[str, ...] = ()  # shell text the wrapper runs (bash -c '...')
    assignments: tuple[str, ...] = ()  # NAME=value pairs it puts into the environment


@dataclass(frozen=True)
class _Spec:
    """Option grammar of a simple prefix wrapper."""

    with_value: frozenset[str] = frozenset()  # options that consume the next word
    positionals: int = 0  # words between the options and the command (timeout DURATION)
    assignments: bool = False  # NAME=value words may follow the options (sudo, env)
    no_command: frozenset[str] = frozenset()  # options after which nothing is executed
    reason: str | None = None


def _spec(
    with_value: str = "",
    positionals: int = 0,
    assignments: bool = False,
    no_command: frozenset[str] = frozenset(),
    reason: str | None = None,
) -> _Spec:
    """Build a ``_Spec`` from a space-separated list of value-taking options."""
    return _Spec(frozenset(with_value.split()), positionals, assignments, no_command, reason)


_SPECS: dict[str, _Spec] = {
    "sudo": _spec(
        "-u -g -C -D -h -p -r -t -U -T -R --user --group --close-from --chdir --host --prompt "
        "--role --type --other-user --command-timeout --chroot",
        assignments=True,
        no_command=frozenset({"-l", "-v", "-k", "-K", "-e", "--list", "--validate", "--edit"}),
        reason="sudo",
    ),
    "doas": _spec("-u -C", reason="privilege escalation (doas)"),
    "pkexec": _spec("--user", reason="privilege escalation (pkexec)"),
    "run0": _spec(
        "-u --user -g --group --unit --property --description --slice -D --chdir --setenv --nice --machine",
        reason="privilege escalation (run0)",
    ),
    "exec": _spec("-a"),
    "nohup": _spec(),
    "setsid": _spec(),
    "time": _spec("-f --format -o --output"),
    "command": _spec(no_command=frozenset({"-v", "-V"})),
    "builtin": _spec(),
    "nice": _spec("-n --adjustment"),
    "timeout": _spec("-s --signal -k --kill-after", positionals=1),
    "stdbuf": _spec("-i -o -e --input --output --error"),
    "ionice": _spec("-c -n -p -P -u --class --classdata --pid --pgid --uid"),
    "taskset": _spec(positionals=1),
    "chroot": _spec("--userspec --groups", positionals=1),
    "chrt": _spec(
        "-T -P -D --sched-runtime --sched-period --sched-deadline",
        positionals=1,
        no_command=frozenset({"-p", "--pid", "-m", "--max"}),
    ),
    "systemd-run": _spec(
        "-p --property -E --setenv -u --unit --description --slice -M --machine -H --host --on-active "
        "--on-calendar --uid --gid --nice -D --working-directory",
        reason="systemd-run (starts a transient service)",
    ),
    "runuser": _spec(
        "-u --user -g --group -G --supp-group -s --shell -w --whitelist-environment", reason="switch user (runuser)"
    ),
    "prlimit": _spec("-p --pid -o --output"),
    "cpulimit": _spec("-l --limit -p --pid -e --exe"),
    "faketime": _spec("-m -p -f", positionals=1),
    "strace": _spec("-e -o -p -s -u -E -a -b -I -O -S -P -X"),
    "ltrace": _spec("-e -o -p -s -u -n -a -A -D -F -l -L"),
    "unbuffer": _spec(),
    "proxychains": _spec("-f"),
    "proxychains4": _spec("-f"),
    "torsocks": _spec("-u -p -a -P"),
    "nsenter": _spec("-t --target -S --setuid -G --setgid"),
    "unshare": _spec("--propagation --setgroups --map-user --map-group -R --root -w --wd -S -G"),
    "flock": _spec("-w --timeout -E --conflict-exit-code", positionals=1),
    "catchsegv": _spec(),
    "daemonize": _spec("-c -e -o -p -l -u -E"),
    "xvfb-run": _spec("-e -f -n -p -s -w --error-file --auth-file --server-num --xauth-protocol --server-args --wait"),
    "caffeinate": _spec("-t -w"),
}


def command_name(word: str) -> str:
    """``/usr/bin/rm`` and ``rm`` are the same command."""
    return posixpath.basename(word) if "/" in word else word


def unwrap(argv: tuple[str, ...]) -> Step | None:
    """Peel one wrapper off ``argv``; None when ``argv[0]`` is not a wrapper."""
    if not argv:
        return None
    name = command_name(argv[0])
    special = _SPECIAL.get(name)
    if special is not None:
        return special(argv)
    if name in SHELLS:
        return _shell(argv)
    spec = _SPECS.get(name)
    if spec is None:
        return None
    return _prefix(argv, spec)


def _prefix(argv: tuple[str, ...], spec: _Spec) -> Step:
    """Generic wrapper: skip options (and their values), positionals and assignments."""
    reasons = (spec.reason,) if spec.reason else ()
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-") or arg == "-":
            break
        if arg in spec.no_command:
            return Step((), reasons)
        i += 2 if arg in spec.with_value else 1
    i += spec.positionals
    assigned: list[str] = []
    if spec.assignments:
        while i < len(argv) and _is_assignment(argv[i]):
            assigned.append(argv[i])
            i += 1
    return Step(tuple(argv[i:]), reasons, assignments=tuple(assigned))


def _is_assignment(word: str) -> bool:
    name, eq, _ = word.partition("=")
    return bool(eq) and name.isidentifier()


def _shell(argv: tuple[str, ...]) -> Step | None:
    """``bash -c 'payload'`` (also ``-lc``, ``-ec``, ``-o pipefail -c``) runs the payload.

    Without ``-c`` the shell runs a script file or stdin: not a wrapper, the rules and
    the pipeline checks deal with it.
    """
    c_mode = False
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg in ("--", "-"):
            i += 1
            break
        if arg in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            i += 2
            continue
        if arg.startswith("--"):
            if arg == "--command":  # fish
                c_mode = True
            i += 1
            continue
        if len(arg) > 1 and arg[0] in "-+":
            if arg[0] == "-" and "c" in arg[1:]:
                c_mode = True
            i += 1
            continue
        break
    if not c_mode:
        return None
    if i >= len(argv):
        return Step(())
    return Step((), payloads=(with_positionals(argv[i], argv[i + 1 :]),))


_PARAM = r"\$(?:\{(?P<braced>[0-9@*])\}|(?P<bare>[0-9@*]))"
# Outside double quotes: an escape, a single-quoted string, "$@" whole, a double quote, a parameter.
_OUTSIDE = re.compile(r"\\.|'[^']*'|(?P<all>\"\$(?:\{@\}|@)\")|\"|" + _PARAM, re.S)
_INSIDE = re.compile(r"\\.|\"|" + _PARAM, re.S)  # inside double quotes
_DQ_SPECIAL = re.compile(r'([\\"$`])')


def with_positionals(payload: str, params: tuple[str, ...]) -> str:
    """``sh -c '"$0" -rf /' rm``: words after the payload are ``$0``, ``$1``, ...; put them
    in, quoted for where they stand (``"$1"`` and ``$1`` alike, ``"$@"`` one word each), so
    the payload is examined with the values it will run with."""
    if not params or "$" not in payload:
        return payload
    out: list[str] = []
    pos = 0
    in_dquote = False
    while True:
        m = (_INSIDE if in_dquote else _OUTSIDE).search(payload, pos)
        if m is None:
            out.append(payload[pos:])
            return "".join(out)
        out.append(payload[pos : m.start()])
        pos = m.end()
        token, group = m.group(), m.lastgroup
        if group is None:  # an escape, a single-quoted string or a double quote
            in_dquote = in_dquote != (token == '"')
            out.append(token)
        elif group == "all":
            out.append(" ".join(map(shlex.quote, params[1:])))
        else:
            out.append(_parameter(m.group(group), params, in_dquote))


def _parameter(key: str, params: tuple[str, ...], in_dquote: bool) -> str:
    if key in "@*":
        value = " ".join(params[1:])
    else:
        index = int(key)
        value = params[index] if index < len(params) else ""
    return _DQ_SPECIAL.sub(r"\\\1", value) if in_dquote else shlex.quote(value) if value else ""


def _env(argv: tuple[str, ...]) -> Step:
    """``env [-i] [-u NAME] [NAME=value]... CMD``; ``env -S 'text'`` splits text like a shell."""
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        split = _split_string(argv, i)
        if split is not None:
            text, rest = split
            return Step((), payloads=(" ".join([text, *map(shlex.quote, rest)]),))
        if arg == "-" or not arg.startswith("-"):
            break
        i += 2 if arg in ("-u", "--unset", "-C", "--chdir", "-P") else 1
    start = i
    while i < len(argv) and "=" in argv[i][1:]:  # env takes any NAME=VALUE (BASH_FUNC_f%%=...)
        i += 1
    return Step(tuple(argv[i:]), assignments=tuple(argv[start:i]))


def _split_string(argv: tuple[str, ...], i: int) -> tuple[str, tuple[str, ...]] | None:
    """The text of ``-S TEXT`` / ``-STEXT`` / ``--split-string=TEXT`` at ``argv[i]``, and
    the words after it."""
    arg = argv[i]
    if arg in ("-S", "--split-string"):
        return (argv[i + 1] if i + 1 < len(argv) else ""), argv[i + 2 :]
    if arg.startswith("--split-string="):
        return arg.split("=", 1)[1], argv[i + 1 :]
    if arg.startswith("-S"):
        return arg[2:], argv[i + 1 :]
    return None


def _busybox(argv: tuple[str, ...]) -> Step:
    if len(argv) > 1 and argv[1].startswith("-"):
        return Step(())
    return Step(tuple(argv[1:]))


def _eval(argv: tuple[str, ...]) -> Step:
    return Step((), payloads=(" ".join(argv[1:]),)) if len(argv) > 1 else Step(())


def _trap(argv: tuple[str, ...]) -> Step:
    args = [a for a in argv[1:] if a not in ("--", "-p", "-l")]
    if len(args) >= 2 and args[0] not in ("", "-"):
        return Step((), payloads=(args[0],))
    return Step(())


def _su(argv: tuple[str, ...]) -> Step:
    name = command_name(argv[0])
    if (
        name == "runuser"
        and "-c" not in argv
        and "--command" not in argv
        and not any(a.startswith("--command=") for a in argv)
    ):
        return _prefix(argv, _SPECS["runuser"])
    if name == "sg" and len(argv) >= 3 and argv[2] not in ("-c",):
        return Step(tuple(argv[2:]), ("switch group (sg)",))
    reasons = (f"switch user ({name})",)
    for i, arg in enumerate(argv[1:], start=1):
        if arg in ("-c", "--command") and i + 1 < len(argv):
            return Step((), reasons, payloads=(argv[i + 1],))
        if arg.startswith("--command="):
            return Step((), reasons, payloads=(arg.split("=", 1)[1],))
    return Step((), reasons)


_SSH_WITH_VALUE = frozenset(
    {"-b", "-c", "-D", "-E", "-e", "-F", "-I", "-i", "-J", "-L", "-l", "-m", "-O", "-o", "-p", "-Q",
     "-R", "-S", "-W", "-w", "-B", "-P"}
)  # fmt: skip


def _ssh(argv: tuple[str, ...]) -> Step:
    """``ssh host 'cmd'`` runs ``cmd`` on the remote host: examine it the same way."""
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-"):
            break
        i += 2 if arg in _SSH_WITH_VALUE else 1
    remote = argv[i + 1 :]
    return Step((), payloads=(" ".join(remote),)) if remote else Step(())


def _watch(argv: tuple[str, ...]) -> Step:
    i = 1
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] in ("-n", "--interval") else 1
    rest = argv[i:]
    return Step((), payloads=(" ".join(rest),)) if rest else Step(())


def _flock(argv: tuple[str, ...]) -> Step:
    for i, arg in enumerate(argv[1:], start=1):
        if arg in ("-c", "--command") and i + 1 < len(argv):
            return Step((), payloads=(argv[i + 1],))
    return _prefix(argv, _SPECS["flock"])


_SPECIAL: dict[str, Callable[[tuple[str, ...]], Step]] = {
    "env": _env,
    "busybox": _busybox,
    "eval": _eval,
    "trap": _trap,
    "su": _su,
    "runuser": _su,
    "sg": _su,
    "ssh": _ssh,
    "watch": _watch,
    "flock": _flock,
}
