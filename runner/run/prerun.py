"""pre_run: a command or script run through the job's backend before the agent.

Its stdout goes to the template as ``pre_run.stdout``; a last line ``{"wake": false}`` skips
the run. A path relative to jobs.yaml runs that script (uploaded first on remote backends).
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass

from backends.base import Backend
from runner.config.jobs import Job


@dataclass(frozen=True)
class PreRunResult:
    stdout: str
    exit_code: int
    timed_out: bool
    wake: bool

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


def run_pre(job: Job, backend: Backend, *, run_id: str) -> PreRunResult:
    command = command_for(job, backend, run_id)
    env = {"RUNNER_JOB": job.name, "RUNNER_RUN_ID": run_id}
    result = backend.run(command, cwd=backend.workdir, timeout=job.spec.pre_run_timeout, env=env)
    return PreRunResult(result.output, result.exit_code, result.timed_out, wants_wake(result.output))
