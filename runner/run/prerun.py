"""pre_run: a command or script run through the job's backend before the agent.

It goes through the approval gate first, like a terminal command of the agent: hardline is
refused under every policy, dangerous follows the job's ``approvals:``; a script it names is
classified by its content too. Its stdout goes to the template as ``pre_run.stdout``; a last line ``{"wake": false}`` skips
the run. A path relative to jobs.yaml runs that script (uploaded first on remote backends).
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from backends.base import TIMEOUT_EXIT, Backend
from runner.config.jobfile import Job
from runner.errors import Blocked

if TYPE_CHECKING:
    from runner.safety.approval import Decision


@dataclass(frozen=True)
class PreRunResult:
    stdout: str
    exit_code: int
    timed_out: bool
    wake: bool
    #: the run's own ``timeout:`` stopped it (not ``pre_run_timeout``): the run ends ``timed_out``
    run_timeout: bool = False

    def as_vars(self) -> dict[str, object]:
        return {"stdout": self.stdout, "exit_code": self.exit_code}


def wants_wake(stdout: str) -> bool:
    lines = [ln for ln in stdout.strip().splitlines() if ln.strip()]
    if not lines:
        return True
    try:
        data = json.loads(lines[-1])
    except ValueError:
        return True
    return not (isinstance(data, dict) and data.get("wake") is False)


def command_for(job: Job, backend: Backend, run_id: str) -> str:
    text = job.spec.pre_run or ""
    first = shlex.split(text)[0] if text.strip() else ""
    script = job.resolve_path(first) if first and not first.startswith("/") else None
    if script is None or not script.is_file():
        return text
    rest = text.strip()[len(first) :]
    if backend.is_local:
        runner = "" if os.access(script, os.X_OK) else "sh "
        return f"{runner}{shlex.quote(str(script))}{rest}"
    remote = f"/tmp/runner-prerun-{run_id}-{script.name}"
    backend.write_file(remote, script.read_bytes())
    return f"chmod +x {shlex.quote(remote)} && {shlex.quote(remote)}{rest}"


def texts_to_check(job: Job) -> list[str]:
    """What the approval gate sees of a ``pre_run``: the command line, and the text of the script
    it names (a shell script is classified as a whole, line by line as the shell reads it)."""
    text = job.spec.pre_run or ""
    out = [text]
    script = _script_path(text, job)
    if script is not None:
        content = script.read_text(encoding="utf-8", errors="replace")
        if _is_shell(content):
            out.append(content)
    return out


_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "busybox"})


def _is_shell(content: str) -> bool:
    """A script without a shebang runs under ``sh``; one naming another interpreter is not shell."""
    if not content.startswith("#!"):
        return True
    words = content[2:].partition("\n")[0].split()
    names = [os.path.basename(w) for w in words if not w.startswith("-")]
    if names and names[0] == "env":
        names = names[1:]
    return not names or names[0] in _SHELLS


def check_pre(job: Job, check: Callable[[str], Decision]) -> None:
    """Refuse a ``pre_run`` the job's policy would not let the agent run: hardline under every
    policy, dangerous unless the policy (``approve``, an ``allow:`` pattern, a person) allows it."""
    for text in texts_to_check(job):
        decision = check(text)
        if not decision.allowed:
            what = "pre_run" if text == job.spec.pre_run else "pre_run script"
            raise Blocked(
                f"job {job.name}: {what} refused ({decision.level}: {'; '.join(decision.reasons)}) "
                f"under approvals: {job.spec.approvals}"
            )


def _script_path(text: str, job: Job) -> Path | None:
    try:
        first = shlex.split(text)[0] if text.strip() else ""
    except ValueError:
        return None
    if not first:
        return None
    script = job.resolve_path(first)
    return script if script.is_file() else None


def run_pre(job: Job, backend: Backend, *, run_id: str, deadline: float) -> PreRunResult:
    """Run the job's ``pre_run`` within ``pre_run_timeout`` and what is left of the run's own
    ``timeout:`` (``deadline``, ``time.monotonic()``): the run enforces it itself, wherever it
    runs (run-job, serve, a kanban or Celery worker), and the backend kills the command's tree."""
    left = deadline - time.monotonic()
    if left <= 0:  # the backend took the whole timeout to open: nothing is started
        return PreRunResult("", TIMEOUT_EXIT, True, True, run_timeout=True)
    limit = min(job.spec.pre_run_timeout, left)
    command = command_for(job, backend, run_id)
    env = {"RUNNER_JOB": job.name, "RUNNER_RUN_ID": run_id}
    result = backend.run(command, cwd=backend.workdir, timeout=limit, env=env)
    by_run = result.timed_out and limit < job.spec.pre_run_timeout
    return PreRunResult(result.output, result.exit_code, result.timed_out, wants_wake(result.output), by_run)
