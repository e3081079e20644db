"""The shell's own state: variables that change what later commands run or load, and
covering tracks.

``check_assignment`` sees every ``NAME=value`` the classifier meets: standalone, in front
of a command, after ``export``/``declare``/``local``/``readonly``, or given to ``env``.

* Variables whose value a program runs as a command (``GIT_SSH_COMMAND``, ``PAGER``,
  ``PROMPT_COMMAND``, ...): the value is classified as a command.
* Search paths: ``PATH``, ``LD_LIBRARY_PATH`` and ``PYTHONPATH`` may only gain system
  folders (``/usr``, ``/bin``, ``/opt``, ...); ``PATH`` also the usual per-user tool folders
  (``~/.local/bin``, ``~/.cargo/bin``, ``$VIRTUAL_ENV/bin``, ...) and ``PYTHONPATH`` folders
  of the project (relative, without ``..``). Anything else (``/tmp/evil``, ``.``, an empty
  entry, an unresolved expansion) lets a later command run or import code the classifier
  never saw: dangerous.
* ``LD_PRELOAD``/``LD_AUDIT`` (a library loaded into every program) and ``BASH_ENV`` (a
  file every non-interactive bash sources) are dangerous with any value; ``ENV`` (sourced
  by interactive ``sh``) when its value is a path. A file written earlier in the same
  command line is examined as the script it becomes.
* Covering tracks: ``history -c``/``-d``, ``set +o history``, ``unset HISTFILE``,
  ``HISTFILE=...``, ``HISTSIZE=0``.
"""

from __future__ import annotations

import posixpath
import re

from runner.safety.shell.common import Rule, Sink, parse_args
from runner.safety.shell.paths import normalize_path
from runner.safety.shell.rules_exec import exec_value
from runner.safety.shell.rules_written import run_file

# Environment variables whose value a program runs as a command.
_EXEC_VARS = frozenset(
    {"GIT_SSH_COMMAND", "GIT_SSH", "GIT_PAGER", "PAGER", "MANPAGER", "GIT_EDITOR", "EDITOR", "VISUAL",
     "GIT_EXTERNAL_DIFF", "GIT_SEQUENCE_EDITOR", "GIT_ASKPASS", "SSH_ASKPASS", "GIT_PROXY_COMMAND",
     "LESSOPEN", "LESSCLOSE", "PROMPT_COMMAND", "SUDO_ASKPASS", "BROWSER"}
)  # fmt: skip
_PRELOAD = frozenset({"LD_PRELOAD", "LD_AUDIT"})
_HISTORY_OFF = frozenset({"HISTSIZE", "HISTFILESIZE"})

_SYSTEM_ROOTS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/snap")
_USER_TOOLS = frozenset({"/home/~/.local/bin", "/home/~/bin", "/home/~/.cargo/bin", "/home/~/go/bin"})
_TOOL_HOME = re.compile(
    r"\$(?:VIRTUAL_ENV|CONDA_PREFIX|GOPATH|GOROOT|CARGO_HOME|JAVA_HOME|PYENV_ROOT|PNPM_HOME|BUN_INSTALL"
    r"|DENO_INSTALL|NVM_BIN)(?:/(?:bin|shims))?/?"
)
_BRACED = re.compile(r"\$\{(\w+)[^}]*\}")  # ${PATH:+:$PATH} -> $PATH, ${HOME} -> $HOME
_PROJECT_PREFIX = re.compile(r"^(?:\$PWD|\$\(pwd\)|`pwd`)(?=/|$)")
_UNRESOLVED = re.compile(r"[$`]")


def check_assignment(name: str, value: str, append: bool, sink: Sink) -> None:
    """Report what assigning ``value`` to ``name`` (``+=`` when ``append``) lets later commands do."""
    if name == "DOCKER_HOST":
        sink.danger("DOCKER_HOST (talks to another Docker daemon)")
    elif name in _EXEC_VARS:
        if value:
            exec_value(value, sink, f"{name}=", always=name == "PROMPT_COMMAND")
    elif name in _SEARCH_PATHS:
        _search_path(name, value, append, sink)
    elif name in _PRELOAD:
        if value:
            sink.danger(f"{name} (loads a library into every program)")
    elif name in ("BASH_ENV", "ENV"):
        _startup_file(name, value, sink)
    elif name == "HISTFILE" or (name in _HISTORY_OFF and value in ("", "0")):
        sink.danger(f"{name}= turns off the shell history (covering tracks)")


def _search_path(name: str, value: str, append: bool, sink: Sink) -> None:
    allowed = _SEARCH_PATHS[name]
    for entry in _new_entries(name, value, append):
        if not allowed(entry):
            shown = entry[:40] if entry else "the current folder (an empty entry)"
            sink.danger(f"{name} gets {shown}, not a system folder")
            return


def _new_entries(name: str, value: str, append: bool) -> list[str]:
    """The entries of a search path value other than the variable's old value."""
    if not value:
        return []
    if "${" in value:
        value = _BRACED.sub(r"$\1", value)
    entries = value.split(":")
    if append and not entries[0]:
        entries = entries[1:]  # PATH+=:/x appends one entry; the leading colon is no empty entry
    return [e for e in entries if e != f"${name}"]


def _system_folder(entry: str) -> bool:
    if not entry.startswith("/") or _UNRESOLVED.search(entry):
        return False
    norm = normalize_path(entry)
    if "tmp" in norm.split("/"):
        return False  # /usr/tmp is a link to the world-writable /var/tmp on some systems
    return any(norm == root or norm.startswith(root + "/") for root in _SYSTEM_ROOTS)


def _tool_folder(entry: str) -> bool:
    """``PATH``: system folders and the usual per-user tool folders."""
    return _system_folder(entry) or bool(_TOOL_HOME.fullmatch(entry)) or normalize_path(entry) in _USER_TOOLS


def _python_folder(entry: str) -> bool:
    """``PYTHONPATH``: system folders and folders of the project (``src``, ``.``, ``$PWD/lib``)."""
    if _system_folder(entry):
        return True
    rest = _PROJECT_PREFIX.sub(".", entry, count=1)
    if rest.startswith(("/", "~")) or _UNRESOLVED.search(rest):
        return False
    norm = posixpath.normpath(rest) if rest else "."
    return norm != ".." and not norm.startswith("../")


_SEARCH_PATHS = {"PATH": _tool_folder, "LD_LIBRARY_PATH": _system_folder, "PYTHONPATH": _python_folder}


def _startup_file(name: str, value: str, sink: Sink) -> None:
    """``BASH_ENV=FILE`` is sourced by every non-interactive bash; ``ENV=FILE`` by an
    interactive ``sh``. ``ENV=production`` (an application's own variable, no path) is not
    flagged unless a file of that name was written in the same command line."""
    if not value:
        return
    written = normalize_path(value, sink.cwd) in sink.written
    if name == "ENV" and not written and "/" not in value and not _UNRESOLVED.search(value):
        return
    sink.danger(f"{name} (a file the shell sources at start)")
    run_file(value, sink, "shell")


# ---------------------------------------------------------------- covering tracks


def history(name: str, args: tuple[str, ...], sink: Sink) -> None:
    parsed = parse_args(args)
    if {"c", "d"} & parsed.short:
        sink.danger("history -c/-d clears the shell history (covering tracks)")


def set_builtin(name: str, args: tuple[str, ...], sink: Sink) -> None:
    for i, arg in enumerate(args[:-1]):
        if arg == "+o" and args[i + 1] == "history":
            sink.danger("set +o history turns off the shell history (covering tracks)")


def unset(name: str, args: tuple[str, ...], sink: Sink) -> None:
    if "HISTFILE" in args:
        sink.danger("unset HISTFILE turns off the shell history (covering tracks)")


RULES: dict[str, Rule] = {"history": history, "set": set_builtin, "unset": unset}
