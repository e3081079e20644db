"""A validated summary of jobs.yaml for `runner jobs list`, so listing skips the strict parse.

Every command validates jobs.yaml with the pydantic schema before trusting it; importing
pydantic and building those models is about 0.2 s, most of a listing. After a successful
validation, the few fields a listing shows are written to
``RUNNER_HOME/cache/jobs-list-<hash of the jobs.yaml path>.json`` together with what the
validation depended on: the bytes of jobs.yaml and config.yaml, runner's own source files,
and whether each file the jobs refer to exists. The summary is used only when all of that
is unchanged; anything else falls back to the full validation (which reports errors).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.config.schedules import Schedule, parse_duration, parse_schedule, parse_timezone

PACKAGE_DIRS = [Path(__file__).parents[1]]  # runner/, runner/backends/ included
VERSION = 2


@dataclass(frozen=True)
class ListedSpec:
    schedule: str | None
    enabled: bool
    jitter: float
    description: str
    backend_label: str
    chain: str = ""  # how events start it besides its schedule: "after a, b (success); webhook"


@dataclass(frozen=True)
class ListedJob:
    """The part of a validated Job a listing needs (duck-compatible with runner.serve.planner)."""

    name: str
    tz_name: str
    spec: ListedSpec
    schedule_obj: Schedule | None


def _cache_file(home: Path, jobs_path: Path) -> Path:
    tag = hashlib.sha256(str(jobs_path.resolve()).encode()).hexdigest()[:16]
    return home / "cache" / f"jobs-list-{tag}.json"


def code_stamp() -> str:
    """Path and mtime of every ``.py`` file under runner/, subpackages (runner/backends/ too) included."""
    h = hashlib.sha256()
    for folder in PACKAGE_DIRS:
        for top, dirs, files in os.walk(folder):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(top, name)
                    h.update(f"{path}:{os.stat(path).st_mtime_ns}".encode())
    return h.hexdigest()


def files_key(jobs_path: Path, config_path: Path) -> str:
    """The hash of jobs.yaml, config.yaml (or its absence) and runner's code (``code_stamp``)."""
    h = hashlib.sha256()
    h.update(jobs_path.read_bytes())
    h.update(b"\0")
    h.update(config_path.read_bytes() if config_path.exists() else b"(no config)")
    h.update(code_stamp().encode())
    return h.hexdigest()


def _depends_on(job: Any) -> list[str]:
    paths = [str(job.workdir)]
    prompt = job.prompt_path()
    if prompt is not None:
        paths.append(str(prompt))
    return paths


def chain_label(spec: Any) -> str:
    """``after a, b (success); webhook``: the events that start a job ("" for none)."""
    parts = []
    if spec.after is not None:
        parts.append(f"after {', '.join(spec.after.jobs)} ({spec.after.when})")
    if spec.webhook is not None:
        parts.append("webhook")
    return "; ".join(parts)


def save(home: Path, jobs_path: Path, config_path: Path, jobs: list[Any], labels: dict[str, str]) -> None:
    """Record the summary of a jobs.yaml that has just passed full validation."""
    checks = {p: os.path.exists(p) for job in jobs for p in _depends_on(job)}
    doc = {
        "version": VERSION,
        "key": files_key(jobs_path, config_path),
        "checks": checks,
        "jobs": [
            {
                "name": j.name,
                "tz": j.tz_name,
                "schedule": j.spec.schedule,
                "enabled": j.spec.enabled,
                "jitter": j.spec.jitter,
                "description": j.spec.description,
                "backend": labels[j.name],
                "chain": chain_label(j.spec),
            }
            for j in jobs
        ],
    }
    path = _cache_file(home, jobs_path)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


def load(home: Path, jobs_path: Path, config_path: Path) -> list[ListedJob] | None:
    """The recorded summary if nothing it depends on changed, else None."""
    path = _cache_file(home, jobs_path)
    try:
        doc = json.loads(path.read_text())
        if doc.get("version") != VERSION or doc.get("key") != files_key(jobs_path, config_path):
            return None
    except (OSError, ValueError):
        return None
    if any(os.path.exists(p) != existed for p, existed in doc["checks"].items()):
        return None
    out = []
    for j in doc["jobs"]:
        tz = parse_timezone(j["tz"])
        sched = parse_schedule(j["schedule"], tz) if j["schedule"] else None
        spec = ListedSpec(
            j["schedule"], j["enabled"], parse_duration(j["jitter"]), j["description"], j["backend"], j["chain"]
        )
        out.append(ListedJob(j["name"], j["tz"], spec, sched))
    return out
