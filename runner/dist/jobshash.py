"""The jobs hash: what serve and a ``runner worker`` compare before a run, so a worker never runs
a job from a different jobs.yaml than the scheduler's.

Defined as the SHA-256 of jobs.yaml's bytes followed by, for each file jobs.yaml references (each
job's prompt template and pre_run script, ``runner.config.jobs.inputs_of``), in order of its path
relative to jobs.yaml's folder: that path, a NUL, the file's bytes, a NUL. Only bytes count: the
same checkout on two machines has the same hash wherever its folder is. Operator tool folders,
skills and config.yaml are not part of it (config.yaml is per machine by design).
"""

from __future__ import annotations

from runner.config.jobs import load_jobs
import hashlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from runner.config.jobfile import JobsFile, inputs_of


def jobs_hash(jobs: JobsFile) -> str:
    return hash_files(jobs.path, inputs_of(jobs.jobs))


def hash_files(jobs_path: Path, inputs: Iterable[Path]) -> str:
    """The hash of jobs.yaml at ``jobs_path`` and the files it references (``inputs``)."""
    digest = hashlib.sha256(jobs_path.read_bytes())
    base = jobs_path.parent.resolve()
    for rel, path in sorted((_relative(p, base), p) for p in inputs):
        digest.update(b"\0" + rel.encode() + b"\0")
        try:
            digest.update(path.read_bytes())
        except OSError:
            digest.update(b"<unreadable>")
    return digest.hexdigest()[:32]


def _relative(path: Path, base: Path) -> str:
    resolved = path.resolve()
    try:
        return resolved.relative_to(base).as_posix()
    except ValueError:
        return resolved.as_posix()


@dataclass(frozen=True)
class LoadedJobs:
    jobs: JobsFile
    hash: str


class HashCache:
    """serve's side: the hash of its jobs.yaml and the files a run protects, computed again only
    when one of them changed on disk."""

    def __init__(self) -> None:
        self._entry: tuple[tuple[object, ...], str] | None = None

    def get(self, jobs_path: Path, inputs: Iterable[Path]) -> str:
        paths = [jobs_path, *inputs]
        key: tuple[object, ...] = (tuple(paths), _stamp(paths))
        if self._entry is None or self._entry[0] != key:
            self._entry = (key, hash_files(jobs_path, paths[1:]))
        return self._entry[1]


def _stamp(paths: list[Path]) -> tuple[tuple[int, int, int], ...]:
    out = []
    for p in paths:
        try:
            st = os.stat(p)
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            out.append((0, 0, 0))
    return tuple(out)


class JobsCache:
    """A worker's jobs.yaml, loaded again (and hashed again) only when it or a file it references
    changed on disk."""

    def __init__(self, path: Path, default_timezone: str, own_tools: Callable[[], Iterable[str]] | None):
        self.path, self.default_timezone, self.own_tools = path, default_timezone, own_tools
        self._entry: tuple[tuple[tuple[int, int, int], ...], LoadedJobs] | None = None

    def current(self) -> LoadedJobs:
        if self._entry is not None:
            stamp, loaded = self._entry
            if _stamp([self.path, *inputs_of(loaded.jobs.jobs)]) == stamp:
                return loaded
        jobs = load_jobs(self.path, default_timezone=self.default_timezone, own_tools=self.own_tools)
        loaded = LoadedJobs(jobs, jobs_hash(jobs))
        self._entry = (_stamp([self.path, *inputs_of(jobs.jobs)]), loaded)
        return loaded
