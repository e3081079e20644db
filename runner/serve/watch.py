"""Hot reload for ``runner serve``: jobs.yaml and the files it references, polled about once a
second (and reloaded at once on SIGHUP).

The parsing runs on a watcher thread so a 1,000-job file never delays a fire; the result is
handed to the main loop, which installs it. An invalid edit is logged, problem by problem,
and the last good jobs keep running.
"""

from __future__ import annotations

import logging
import os
import queue
import shlex
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from runner.config.jobs import Job, JobsFile, load_jobs
from runner.errors import RunnerError
from runner.serve.schedule import ScheduleTicker

if TYPE_CHECKING:
    from runner.settings import Settings

Signature = tuple[tuple[str, int, int, int] | tuple[str], ...]


@dataclass(frozen=True)
class Loaded:
    jobs: JobsFile | None
    problems: tuple[str, ...]
    warnings: tuple[str, ...] = ()


def referenced_files(jobs: JobsFile) -> list[Path]:
    """jobs.yaml, prompt templates and pre_run scripts."""
    files = {jobs.path}
    for job in jobs.jobs.values():
        prompt = job.prompt_path()
        if prompt is not None:
            files.add(prompt)
        files.update(_script(job))
    return sorted(files)


def _script(job: Job) -> list[Path]:
    text = job.spec.pre_run or ""
    try:
        first = shlex.split(text)[0] if text.strip() else ""
    except ValueError:
        return []
    if not first:
        return []
    path = job.resolve_path(first)
    return [path] if path.is_file() else []


def signature(files: list[Path]) -> Signature:
    out: list[tuple[str, int, int, int] | tuple[str]] = []
    for path in files:
        try:
            st = os.stat(path)
        except OSError:
            out.append((str(path),))
            continue
        out.append((str(path), st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(out)


def load(path: Path, default_timezone: str, settings: Settings | None = None) -> Loaded:
    """jobs.yaml parsed and validated; with ``settings``, the checks of ``runner jobs validate``
    (templates, models, skills, one-shots) become warnings: logged, never blocking the reload."""
    try:
        jobs = load_jobs(path, default_timezone=default_timezone)
    except RunnerError as exc:
        return Loaded(None, tuple(str(exc).splitlines()))
    if settings is None:
        return Loaded(jobs, ())
    from runner.run.checks import check_jobs

    return Loaded(jobs, (), tuple(check_jobs(jobs, settings, now=datetime.now(UTC))))


class JobsWatcher:
    """A daemon thread that reloads jobs.yaml when it or a referenced file changes."""

    def __init__(
        self,
        path: Path,
        *,
        default_timezone: str,
        current: JobsFile,
        wake: Callable[[], None],
        interval: float = 1.0,
        settings: Settings | None = None,
    ):
        self.path, self.default_timezone, self.wake, self.interval = path, default_timezone, wake, interval
        self.settings = settings
        self.results: queue.Queue[Loaded] = queue.Queue()
        self._files = referenced_files(current)
        self._sig = signature(self._files)
        self._poke = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="runner-watch", daemon=True)

    def start(self) -> JobsWatcher:
        self._thread.start()
        return self

    def poke(self) -> None:
        """Reload now (SIGHUP)."""
        self._poke.set()

    def stop(self) -> None:
        self._stopped.set()
        self._poke.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stopped.is_set():
            forced = self._poke.wait(self.interval)
            self._poke.clear()
            if self._stopped.is_set():
                return
            sig = signature(self._files)
            if sig == self._sig and not forced:
                continue
            self._sig = sig
            result = load(self.path, self.default_timezone, self.settings)
            if result.jobs is not None:
                self._files = referenced_files(result.jobs)
                self._sig = signature(self._files)
            self.results.put(result)
            self.wake()


class ReloadTicker:
    """Installs what the watcher loaded, on the main loop."""

    name = "reload"

    def __init__(self, watcher: JobsWatcher, schedule: ScheduleTicker, log: logging.Logger):
        self.watcher, self.schedule, self.log = watcher, schedule, log

    def tick(self, now: datetime) -> None:
        while True:
            try:
                result = self.watcher.results.get_nowait()
            except queue.Empty:
                return
            self._apply(result, now)

    def _apply(self, result: Loaded, now: datetime) -> None:
        for warning in result.warnings:
            self.log.error("%s", warning)
        if result.jobs is None:
            self.log.error("jobs.yaml has errors; still running the last good jobs:")
            for problem in result.problems:
                self.log.error("  %s", problem)
            return
        change = self.schedule.set_jobs(result.jobs.jobs, now)
        self.log.info("reloaded %s: %d jobs (%s)", result.jobs.path, len(result.jobs.jobs), change)

    def next_wake(self, now: datetime) -> datetime | None:
        return None

    def close(self) -> None:
        self.watcher.stop()
