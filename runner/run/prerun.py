"""pre_run: a command or script run through the job's backend before the agent.

It goes through the approval gate first, like a terminal command of the agent: hardline is
refused under every policy, dangerous follows the job's ``approvals:``; a script it names is
classified by its content too. Its stdout goes to the template as ``pre_run.stdout``; a last line ``{"wake": false}`` skips
the run. A path relative to jobs.yaml runs that script (uploaded first on remote backends).

Backends give a command's stdout and stderr as one stream; a pre_run's stderr is kept apart: the
command runs with its stderr in a file of the backend's ``/tmp``, whose last lines come back after
a marker carrying a random nonce (``pre_run.stderr``, the tail a failure names). A pre_run past its
``pre_run_timeout`` has its stderr read by a second short command.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from runner.backends.base import TIMEOUT_EXIT, Backend
from runner.config.jobfile import Job
from runner.config.jobs import PreRunFailure
from runner.config.schedules import format_duration
from runner.errors import Blocked

if TYPE_CHECKING:
    from runner.safety.approval import Decision


STDERR_LINES = 20  # of a pre_run's stderr kept: its last lines, at most STDERR_CHARS
STDERR_CHARS = 2000


@dataclass(frozen=True)
class PreRunResult:
    stdout: str
    exit_code: int
    timed_out: bool
    wake: bool
    #: the run's own ``timeout:`` stopped it (not ``pre_run_timeout``): the run ends ``timed_out``
    run_timeout: bool = False
    #: the last lines of its stderr (``STDERR_LINES``, ``STDERR_CHARS``), not redacted
    stderr: str = ""
    #: ``pre_run_timeout`` (seconds), named when it timed out
    limit: float = 0.0

    @property
    def failed(self) -> bool:
        """A non-zero exit, or stopped at ``pre_run_timeout``."""
        return self.timed_out or self.exit_code != 0

    @property
    def empty(self) -> bool:
        """Nothing but whitespace on stdout (``skip_when_empty``)."""
        return not self.stdout.strip()

    def how(self) -> str:
        """How it failed: ``exit 3``, ``timed out after 5m``."""
        return f"timed out after {format_duration(self.limit)}" if self.timed_out else f"exit {self.exit_code}"

    def as_vars(self) -> dict[str, object]:
        return {"stdout": self.stdout, "exit_code": self.exit_code, "stderr": self.stderr}


class Verdict(StrEnum):
    """What a pre_run's result does to the run, in this order: failed (under ``pre_run_failure:
    fail``, or a script-only job's), skipped by ``{"wake": false}``, skipped as empty
    (``skip_when_empty``), else go on (``inform``: with the failure told to the model)."""

    GO = "go"
    FAIL = "fail"
    INFORM = "inform"
    WAKE_FALSE = "wake_false"
    EMPTY = "empty"


def verdict(pre: PreRunResult, *, policy: PreRunFailure, agent: bool, skip_when_empty: bool) -> Verdict:
    """One of ``Verdict``'s words for ``pre`` under the job's keys. A script-only job (``agent:
    false``) fails on a failed pre_run whatever ``pre_run_failure`` says: the script is the job."""
    if pre.failed and (not agent or policy == PreRunFailure.FAIL):
        return Verdict.FAIL
    if not pre.wake:
        return Verdict.WAKE_FALSE
    if pre.failed and policy == PreRunFailure.INFORM:
        return Verdict.INFORM  # the failure is news even when stdout is empty
    if skip_when_empty and pre.empty:
        return Verdict.EMPTY
    return Verdict.GO


def failure_text(pre: PreRunResult) -> str:
    """The error of a run its pre_run failed: how, and the end of its stderr (not redacted)."""
    head = f"pre_run {'timed out after ' + format_duration(pre.limit) if pre.timed_out else f'exited {pre.exit_code}'}"
    tail = pre.stderr.strip("\n")
    if not tail:
        return head
    if "\n" not in tail:
        return f"{head}; stderr: {tail}"
    return f"{head}; stderr, last lines:\n{tail}"


def failure_section(pre: PreRunResult) -> str:
    """``pre_run_failure: inform``: the marked section added to the model's prompt."""
    tail = pre.stderr.strip("\n")
    fence = "```"
    while fence in tail:
        fence += "`"
    told = [
        f"## pre_run failed ({pre.how()})",
        "The job's pre_run script, which prepares this run's input, failed; what it printed may be "
        "incomplete or missing. Take that into account in your answer.",
    ]
    if tail:
        told += ["The end of its stderr:", f"{fence}\n{tail}\n{fence}"]
    else:
        told.append("It wrote nothing on stderr.")
    return "\n".join(told)


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


def run_pre(job: Job, backend: Backend, *, run_id: str, deadline: float, step_key: str = "") -> PreRunResult:
    """Run the job's ``pre_run`` within ``pre_run_timeout`` and what is left of the run's own
    ``timeout:`` (``deadline``, ``time.monotonic()``): the run enforces it itself, wherever it
    runs (run-job, serve, a kanban or Celery worker), and the backend kills the command's tree.
    ``step_key``: its idempotency key (``RUNNER_STEP_KEY``, the same in every attempt of the run)."""
    left = deadline - time.monotonic()
    if left <= 0:  # the backend took the whole timeout to open: nothing is started
        return PreRunResult("", TIMEOUT_EXIT, True, True, run_timeout=True, limit=job.spec.pre_run_timeout)
    limit = min(job.spec.pre_run_timeout, left)
    split = Split(secrets.token_hex(8))
    command = split.wrap(command_for(job, backend, run_id))
    env = {"RUNNER_JOB": job.name, "RUNNER_RUN_ID": run_id, "RUNNER_STEP_KEY": step_key or f"{run_id}:pre_run"}
    result = backend.run(command, cwd=backend.workdir, timeout=limit, env=env)
    stdout, stderr = split.parts(result.output)
    by_run = result.timed_out and limit < job.spec.pre_run_timeout
    if result.timed_out and not by_run:  # its stderr is still in the file: read what it wrote before the kill
        late = backend.run(split.leftover(), cwd=backend.workdir, timeout=5, env=env)
        stderr = late.output if late.exit_code == 0 and not late.timed_out else ""
    return PreRunResult(
        stdout,
        result.exit_code,
        result.timed_out,
        wants_wake(stdout),
        by_run,
        stderr=_tail(stderr),
        limit=job.spec.pre_run_timeout,
    )


@dataclass(frozen=True)
class Split:
    """A pre_run command with its stderr kept apart from its stdout (see the module's docstring).
    Shell builtins plus ``tail`` and ``rm`` (coreutils or busybox), in any POSIX shell."""

    nonce: str

    @property
    def path(self) -> str:
        return f"/tmp/.runner-prerun-{self.nonce}.err"

    @property
    def marker(self) -> str:
        return f"__RUNNER_PRERUN_STDERR_{self.nonce}__"

    def wrap(self, command: str) -> str:
        f = shlex.quote(self.path)
        # the file is made private first; where /tmp cannot be written, stderr stays in the stream
        return (
            f"if (umask 077 && : >{f}) 2>/dev/null; then exec 3>{f}; else exec 3>&2; fi\n"
            f"(\n{command}\n) 2>&3 3>&-\n"
            "__runner_rc=$?\n"
            "exec 3>&-\n"
            f"if [ -s {f} ]; then printf '\\n%s\\n' {self.marker}; {self._tail()}; fi\n"
            f"rm -f {f}\n"
            'exit "$__runner_rc"'
        )

    def _tail(self) -> str:
        return f"tail -n {STDERR_LINES} {shlex.quote(self.path)} | tail -c {STDERR_CHARS * 2}"

    def leftover(self) -> str:
        """The command that reads (and removes) the stderr file of a pre_run its timeout killed."""
        f = shlex.quote(self.path)
        return f"if [ -f {f} ]; then {self._tail()}; rm -f {f}; fi"

    def parts(self, output: str) -> tuple[str, str]:
        """(stdout, stderr's tail) of the wrapped command's output."""
        stdout, sep, stderr = output.rpartition(f"\n{self.marker}\n")
        return (stdout, stderr) if sep else (output, "")


def _tail(text: str) -> str:
    """The last ``STDERR_LINES`` lines of ``text``, at most ``STDERR_CHARS`` characters (whole lines
    where it can)."""
    lines = text.rstrip("\n").split("\n")[-STDERR_LINES:]  # lines as ``tail -n`` counts them
    out = "\n".join(lines)
    if len(out) > STDERR_CHARS:
        out = out[-STDERR_CHARS:]
        newline = out.find("\n")
        out = out[newline + 1 :] if 0 <= newline < len(out) - 1 else out
    return out
