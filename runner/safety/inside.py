"""Is this process part of a run? The CLI's control commands refuse to act from inside one.

A run's commands could otherwise answer the run's own parked approval, cancel or trigger runs,
or reset keys with the operator's authority (``runner approvals grant`` in a background loop).
The sandbox is the first line: it shows a run neither the store nor config.yaml. This check is
the second, for ``sandbox: off`` and for a PostgreSQL store a sandboxed run could reach over the
network: a process is inside a run when ``RUNNER_RUN_ID`` is set (every command of a run gets
it), or when one of its ancestors is a runner process that runs agents (``run-job``, ``serve`` and
its warm forkserver, ``kanban work``/``dispatch``, ``worker``) or a sandbox's first process. A
command cannot change who its ancestors are: a run's process is the subreaper of what its
commands start, so even a double fork stays below it, and inside a sandbox every process
descends from its first.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from runner.errors import UsageError
from runner.host.secrets import command_path

#: runner commands whose processes run agents (and so whose descendants are a run's commands)
RUNS_AGENTS = frozenset({("run-job",), ("serve",), ("worker",), ("kanban", "work"), ("kanban", "dispatch")})
#: modules run with ``python -m`` that belong to such a process tree (serve's forkserver, MCP bridges)
AGENT_MODULES = frozenset({"runner.run.forks", "runner.mcp.bridge"})
MAX_DEPTH = 64
#: the last argument of a run's sandbox's first process (``runner.backends.sandbox``): every process in
#: the sandbox descends from it
LAUNCHER_MARK = "runner-sandbox"


def run_of(environ: Mapping[str, str] | None = None, pid: int | None = None) -> str | None:
    """What makes this process part of a run (a line for the refusal), or None when it is not."""
    env = os.environ if environ is None else environ
    if env.get("RUNNER_RUN_ID"):
        return f"run {env['RUNNER_RUN_ID']}"
    for ancestor, argv in ancestors(os.getpid() if pid is None else pid):
        if runs_agents(argv):
            return f"process {ancestor} ({' '.join(argv[:4])})"
    return None


def refuse_inside_run(what: str, environ: Mapping[str, str] | None = None) -> None:
    """UsageError (exit 2) when asked to ``what`` (``answer an approval``) from inside a run."""
    inside = run_of(environ)
    if inside is not None:
        raise UsageError(
            f"refused to {what}: this process was started from inside a run ({inside}); "
            "control of runs belongs to the operator, outside them"
        )


def ancestors(pid: int) -> list[tuple[int, list[str]]]:
    """(pid, command line) of each ancestor of ``pid``, nearest first (empty without /proc)."""
    out: list[tuple[int, list[str]]] = []
    current = _parent(pid)
    while current is not None and current > 1 and len(out) < MAX_DEPTH:
        out.append((current, _cmdline(current)))
        current = _parent(current)
    return out


def runs_agents(argv: Sequence[str]) -> bool:
    """Is ``argv`` a runner process that runs agents (see ``RUNS_AGENTS``), or a sandbox's first process?"""

    if argv[-1:] == [LAUNCHER_MARK] and "-c" in argv:
        return True
    for i, arg in enumerate(argv):
        if arg == "-m" and i + 1 < len(argv):
            module = argv[i + 1]
            if module in AGENT_MODULES:
                return True
            if module == "runner":
                return _agent_path(command_path(argv[i + 2 :]))
            return False
        if os.path.basename(arg) == "runner":
            return _agent_path(command_path(argv[i + 1 :]))
    return False


def _agent_path(path: tuple[str, ...]) -> bool:
    return path[:1] in RUNS_AGENTS or path[:2] in RUNS_AGENTS


def _parent(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(text.rsplit(")", 1)[1].split()[1])


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]
