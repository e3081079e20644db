"""Files written earlier in the same command line and then run.

``echo 'rm -rf /' > x.sh; sh x.sh`` runs what was written. The classifier remembers the
files a command line writes (``Sink.written``: redirections, ``tee``, ``cp``/``mv``/
``install``/``ln`` of a known file, and, with unknown content, ``dd of=``, ``sed -i``,
``truncate`` and other descriptors). A program that runs such a file makes the text a
command: a shell script (``sh x``, ``./x``, ``. x``, ``source x``, ``BASH_ENV=x``, ``at -f
x``), an interpreter's program (``python3 x.py``: like ``python -c``, dangerous unless it
only computes), a Makefile (``make``: its recipes and ``$(shell ...)`` are shell commands),
a test file (``pytest``: ``test_*.py``, ``*_test.py``, ``conftest.py`` and named files are
imported), a git hook (any git command), a ``package.json`` (its scripts, for npm, yarn, pnpm). Running a written file is dangerous whatever it holds, and hardline when what
it runs is; when its content cannot be seen it is dangerous.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Callable

from runner.safety.shell.common import TOO_LARGE, Rule, Sink, Traits, parse_args
from runner.safety.shell.paths import normalize_path
from runner.safety.shell.payloads import code_risk, scan_code
from runner.safety.shell.unwrap import SHELLS

_CODE_SUFFIXES = (".py", ".pl", ".rb", ".js", ".mjs", ".cjs", ".php", ".lua", ".ts")


def run_file(path: str, sink: Sink, lang: str) -> None:
    """A script file is run: downloaded in this command, or written with known text?"""
    if path.rsplit("/", 1)[-1] in sink.downloaded:
        sink.danger("download then execute")
    lang = "interpreter" if path.endswith(_CODE_SUFFIXES) else lang
    run_written(path, sink, "a script", lambda text: run_code(text, sink, lang))


def run_written(path: str, sink: Sink, what: str, run: Callable[[str], None]) -> None:
    """``path`` is run as ``what``: when the command line wrote it, report that and ``run``
    its text when it is known."""
    if sink.written:
        run_written_key(normalize_path(path, sink.cwd), sink, what, run)


def run_written_key(key: str, sink: Sink, what: str, run: Callable[[str], None]) -> None:
    """``run_written`` for a key of ``sink.written``. The file is set aside while its text
    is examined, so a file that runs itself (a test file calling pytest) is examined once."""
    if key not in sink.written:
        return
    text = sink.written.pop(key)
    try:
        if text is None:
            sink.danger(f"runs {what} written by the same command, whose content the classifier cannot see")
        elif text is TOO_LARGE:
            sink.danger(f"runs {what} written by the same command, too large to examine")
        else:
            sink.danger(f"runs {what} written by the same command")
            run(text)
    finally:
        sink.written.setdefault(key, text)


def run_code(text: str, sink: Sink, lang: str) -> None:
    """Run ``text`` as a shell script or as an interpreter's program (by its ``#!`` line)."""
    first = text.lstrip().split("\n", 1)[0]
    if lang == "interpreter" or (first.startswith("#!") and not any(s in first for s in SHELLS)):
        scan_code(text, sink)
        reason = code_risk(text)
        if reason:
            sink.danger(reason)
    else:
        sink.run_script(text)


# ---------------------------------------------------------------- cat of a written file


def cat(name: str, args: tuple[str, ...], sink: Sink) -> Traits | None:
    """``cat FILE...`` of files written with known text prints that text."""
    if not sink.written or not args or any(a.startswith("-") for a in args):
        return None
    texts = [sink.written.get(normalize_path(a, sink.cwd)) for a in args]
    if any(t is None or t is TOO_LARGE for t in texts):
        return None
    return Traits(stdout_text="".join(t for t in texts if t is not None))


# ---------------------------------------------------------------- make

_MAKEFILES = ("GNUmakefile", "makefile", "Makefile")
_MAKE_LONG = "--file --makefile --directory --include-dir --jobs --load-average --what-if --new-file --assume-new"
_MAKE_VARIABLE = re.compile(r"^\s*(?:override\s+|export\s+)?([A-Za-z_][\w.]*)\s*(?:[:+?!]|::|:::)?=\s*(.*)$")
_RULE_RECIPE = re.compile(r"^[^\t#=;][^#=;]*?::?(?!=)[^#=;]*;(.*)$")
_SHELL_FUNCTION = re.compile(r"\$[({]shell\s+([^)}]*)[)}]")
_REFERENCE = re.compile(r"\$[({]([A-Za-z_][\w.]*)[)}]")


def make(name: str, args: tuple[str, ...], sink: Sink) -> Traits | None:
    """``make [-C DIR] [-f FILE] ...``: a Makefile written in this command line runs;
    ``-f -`` reads one from stdin."""
    parsed = parse_args(args, with_value="fCIjlWo", long_with_value=_MAKE_LONG)
    named = [v for k, v in parsed.values.items() if k in ("-f", "--file", "--makefile")]
    if {"-", "/dev/stdin"} & set(named):
        sink.danger("make reads a Makefile from stdin")
        return Traits(stdin_exec="make")
    if sink.written:
        _run_makefiles(named, parsed.values.get("-C") or parsed.values.get("--directory"), sink)
    return None


def _run_makefiles(named: list[str], folder: str | None, sink: Sink) -> None:
    for makefile in named or _MAKEFILES:
        path = posixpath.join(folder, makefile) if folder else makefile
        run_written(path, sink, "a Makefile", lambda text: _run_makefile(text, sink))


def _run_makefile(text: str, sink: Sink) -> None:
    _run_all(makefile_commands(text), sink)


def makefile_commands(text: str) -> list[str]:
    """The shell commands a Makefile runs: its recipe lines (after a tab, or after ``;`` on
    a rule line, without ``@``/``-``/``+``) and its ``$(shell ...)`` calls, with the
    Makefile's own ``$(VAR)`` put in and ``$$`` as ``$``."""
    lines = text.replace("\\\n", " ").split("\n")
    variables: dict[str, str] = {}
    for line in lines:
        m = None if line.startswith("\t") else _MAKE_VARIABLE.match(line)
        if m:
            variables[m.group(1)] = m.group(2)
    commands: list[str] = []
    for line in lines:
        recipe = line[1:] if line.startswith("\t") else None
        rule = None if recipe is not None else _RULE_RECIPE.match(line)
        if rule:
            recipe = rule.group(1)
        if recipe is not None:
            commands.append(_expand_make(recipe.strip().lstrip("@-+ \t"), variables))
        commands.extend(_expand_make(m.group(1), variables) for m in _SHELL_FUNCTION.finditer(line))
    return [c for c in commands if c.strip()]


def _expand_make(text: str, variables: dict[str, str]) -> str:
    if "$" not in text:
        return text
    text = _REFERENCE.sub(lambda m: variables.get(m.group(1), m.group()), text)
    return text.replace("$$", "$")


# ---------------------------------------------------------------- pytest

_TEST_FILE = re.compile(r"(?:test_.*|.*_test|conftest)\.py")


def pytest(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """pytest imports ``test_*.py``, ``*_test.py``, ``conftest.py`` and the files it is
    given: any of them written in this command line runs."""
    if not sink.written:
        return
    named = {normalize_path(a.split("::", 1)[0], sink.cwd) for a in args if not a.startswith("-")}
    for key in list(sink.written):
        if key in named or _TEST_FILE.fullmatch(posixpath.basename(key)):
            run_written_key(key, sink, "a test file", lambda text: run_code(text, sink, "interpreter"))


# ---------------------------------------------------------------- git hooks, package scripts


def git_hooks(sink: Sink) -> None:
    """A git command runs the hooks in ``.git/hooks``: any written in this command line."""
    for key in [k for k in sink.written if "/.git/hooks/" in f"/{k}"]:
        run_written_key(key, sink, "a git hook", lambda text: run_code(text, sink, "shell"))


def package_scripts(name: str, args: tuple[str, ...], sink: Sink) -> None:
    """npm, yarn and pnpm run the ``scripts`` of ``package.json`` (``npm test``, ``npm run
    X``, install hooks): when the command line wrote it, every script is a command."""
    if not sink.written or "--ignore-scripts" in args:
        return
    prefix = next((args[i + 1] for i, a in enumerate(args[:-1]) if a in ("--prefix", "--cwd", "-C", "--dir")), None)
    path = posixpath.join(prefix, "package.json") if prefix else "package.json"
    run_written(path, sink, "a package.json", lambda text: _run_all(_package_scripts(text), sink))


def _package_scripts(text: str) -> list[str]:
    """The script commands of a package.json; text that is not JSON is read as one script."""
    try:
        data = json.loads(text)
    except ValueError:
        return [text]
    scripts = data.get("scripts") if isinstance(data, dict) else None
    if not isinstance(scripts, dict):
        return []
    return [v for v in scripts.values() if isinstance(v, str)]


def _run_all(commands: list[str], sink: Sink) -> None:
    for command in commands:
        sink.run_script(command)


RULES: dict[str, Rule] = {
    "cat": cat,
    "make": make,
    "gmake": make,
    "pytest": pytest,
    "py.test": pytest,
}
