"""What one run protects (``protected_set``), how its sandbox shows the machine
(``sandbox_plan``), and the tamper check at its end.

The sets are described in ``runner.safety.control``; this module gathers the paths from the
settings, jobs.yaml and the skill sources, which the safety package does not import.
"""

from __future__ import annotations

import os
from pathlib import Path

from runner.backends.sandbox import Plan
from runner.config.jobfile import Job, JobsFile, job_inputs, referenced_files
from runner.errors import RunnerError
from runner.safety.control import ControlPlane, Fingerprint, hold_path
from runner.settings import Settings
from runner.skills.loader import sources_for

#: folders beside jobs.yaml that steer later runs (operator tools run in the runner; bundled
#: skills are trusted text): made, empty, when missing inside a run's writable area, so that a
#: read-only mount can stand on them and the run cannot create them
MASKED_BESIDE_JOBS = ("tools", "skills")


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
    tools = _tool_folders(settings)
    home = os.path.normpath(str(settings.home))
    return ControlPlane(
        files=tuple(os.path.normpath(f) for f in files),
        folders=(*skills, *tools, home),
        tool_folders=tools,
        unreadable=(home, os.path.normpath(str(settings.config_path)), os.path.normpath(str(settings.jobs_path))),
        skill_folders=skills,
        workdir=os.path.normpath(str(workdir or job.workdir)),
        exempt=(os.path.join(home, "workspaces"),),
    )


def _jobs_or_none(settings: Settings) -> JobsFile | None:
    try:
        return settings.jobs
    except RunnerError:  # a run of a job given without a jobs.yaml (tests, embedders)
        return None


def _tool_folders(settings: Settings) -> tuple[str, ...]:
    """The operator's tools folders (their code runs in the runner process: never the agent's to
    write). ``tools/`` beside jobs.yaml is protected even before it exists."""

    beside = settings.jobs_path.parent / "tools"
    try:
        dirs = settings.tool_dirs()
    except RunnerError:  # a broken config.yaml: the run fails on it elsewhere
        dirs = ()
    return tuple(dict.fromkeys(os.path.normpath(str(p)) for p in (beside.absolute(), *dirs)))


def _skill_folders(settings: Settings) -> tuple[str, ...]:
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


def sandbox_plan(settings: Settings, job: Job, control: ControlPlane, workdir: Path) -> Plan:
    """What the run's sandbox shows (``runner.backends.sandbox``): the workdir, ``allow_paths`` and
    ``sandbox.writable`` writable; RUNNER_HOME, config.yaml and jobs.yaml hidden; every other
    control file and folder, and the workdir's git config and hooks, read-only."""

    writable = tuple(str(job.resolve_path(p)) for p in job.spec.sandbox.writable)
    writable += tuple(os.path.normpath(os.path.join(workdir, os.path.expanduser(p))) for p in job.spec.allow_paths)
    hidden = control.unreadable
    areas = (str(workdir), *writable)
    read_only = [f for f in control.files if f not in hidden]
    read_only += [d for d in control.folders if d not in hidden]
    read_only += [str(p) for p in masks_inside(settings, areas)]
    return Plan(
        workdir=str(workdir),
        writable=writable,
        read_only=tuple(dict.fromkeys(read_only)),
        hidden=hidden,
        network=job.spec.sandbox.network,
    )


def masks_inside(settings: Settings, areas: tuple[str, ...]) -> tuple[Path, ...]:
    """The folders and files inside ``areas`` (writable folders) that must stay as they are even
    when missing: ``tools/`` and ``skills/`` beside jobs.yaml and the hooks folder of the git
    repository the areas are in (made, empty, when missing), and that repository's config."""
    out: list[Path] = []
    beside = settings.jobs_path.parent
    for name in MASKED_BESIDE_JOBS:
        out.append(beside / name)
    for area in areas:
        gitdir = git_dir(Path(area))
        if gitdir is not None:
            out += [gitdir / "hooks", gitdir / "config"]
    inside = [p for p in dict.fromkeys(out) if any(_inside(p, a) for a in areas)]
    for path in inside:
        if path.name != "config" and not path.exists():
            path.mkdir(parents=True, exist_ok=True)
    return tuple(p for p in inside if p.exists())


def git_dir(folder: Path) -> Path | None:
    """The git folder that holds the config and hooks of the repository ``folder`` is in (a
    worktree's ``.git`` file leads to its common folder), or None outside any repository."""
    for candidate in (folder, *folder.parents):
        dot = candidate / ".git"
        if dot.is_dir():
            return dot
        if dot.is_file():
            return _linked_git_dir(dot)
    return None


def _linked_git_dir(dot: Path) -> Path | None:
    text = dot.read_text(encoding="utf-8", errors="replace").strip()
    if not text.startswith("gitdir:"):
        return None
    gitdir = (dot.parent / text.removeprefix("gitdir:").strip()).resolve()
    common = gitdir / "commondir"
    if common.is_file():
        gitdir = (gitdir / common.read_text(encoding="utf-8", errors="replace").strip()).resolve()
    return gitdir if gitdir.is_dir() else None


def _inside(path: Path, area: str) -> bool:
    root = os.path.realpath(area)
    real = os.path.realpath(path)
    return real == root or real.startswith(root.rstrip("/") + "/")
