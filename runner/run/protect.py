"""What one run protects (``protected_set``) and the tamper check at its end.

The sets are described in ``runner.safety.control``; this module gathers the paths from the
settings, jobs.yaml and the skill sources, which the safety package does not import.
"""

from __future__ import annotations

import os
from pathlib import Path

from runner.config.jobfile import Job, JobsFile, job_inputs, referenced_files
from runner.safety.control import ControlPlane, Fingerprint, hold_path
from runner.settings import Settings


def protected_set(
    settings: Settings,
    job: Job,
    *,
    workdir: Path | None = None,
    cassette: Path | None = None,
    inputs: tuple[str, ...] | None = None,
) -> ControlPlane:
    """jobs.yaml, config.yaml, the inputs jobs.yaml refers to (every job's: another job's template
    steers the next run as much as this one's), the replayed cassette, the bundled and extra
    skill folders, the operator's tools folders, RUNNER_HOME (but not its ``workspaces/``, where kanban tasks work). ``inputs``:
    the referenced files as serve already knows them (a worker then never re-reads jobs.yaml)."""
    files = dict.fromkeys([str(settings.jobs_path), str(settings.config_path)])
    if inputs is not None:
        files.update(dict.fromkeys([*inputs, *map(str, job_inputs(job))]))
    else:
        jobs = _jobs_or_none(settings)
        for ref in referenced_files(jobs) if jobs is not None else job_inputs(job):
            files[str(ref)] = None
    if cassette is not None:
        files[str(cassette.absolute())] = None
    skills = _skill_folders(settings)
    home = os.path.normpath(str(settings.home))
    return ControlPlane(
        files=tuple(os.path.normpath(f) for f in files),
        folders=(*skills, *_tool_folders(settings), home),
        unreadable=(home, os.path.normpath(str(settings.config_path))),
        skill_folders=skills,
        workdir=os.path.normpath(str(workdir or job.workdir)),
        exempt=(os.path.join(home, "workspaces"),),
    )


def _jobs_or_none(settings: Settings) -> JobsFile | None:
    from runner.errors import RunnerError

    try:
        return settings.jobs
    except RunnerError:  # a run of a job given without a jobs.yaml (tests, embedders)
        return None


def _tool_folders(settings: Settings) -> tuple[str, ...]:
    """The operator's tools folders (their code runs in the runner process: never the agent's to
    write). ``tools/`` beside jobs.yaml is protected even before it exists."""
    from runner.errors import RunnerError

    beside = settings.jobs_path.parent / "tools"
    try:
        dirs = settings.tool_dirs()
    except RunnerError:  # a broken config.yaml: the run fails on it elsewhere
        dirs = ()
    return tuple(dict.fromkeys(os.path.normpath(str(p)) for p in (beside.absolute(), *dirs)))


def _skill_folders(settings: Settings) -> tuple[str, ...]:
    from runner.skills.loader import sources_for

    return tuple(os.path.normpath(str(s.root)) for s in sources_for(settings) if s.kind != "home")


def tampered(plane: ControlPlane, before: Fingerprint) -> tuple[str, ...]:
    """The protected files whose content changed since ``before``."""
    return before.changed(plane.fingerprint())


def hold_reloads(settings: Settings, run_id: str, files: tuple[str, ...]) -> Path:
    """Leave the reload hold serve honours; written before the run's final status."""
    path = hold_path(settings.home)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"run {run_id} changed: {', '.join(files)}\n")
    return path
