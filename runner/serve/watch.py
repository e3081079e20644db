"""Hot reload for ``runner serve``: jobs.yaml and the files it references, polled about once a
second (and reloaded at once on SIGHUP).

The parsing runs on a watcher thread so a 1,000-job file never delays a fire; the result is
handed to the main loop, which installs it. A reload is refused, and the last good jobs keep
running, when jobs.yaml is invalid, or empty or without jobs unless it says so (``jobs: {}``: a
truncate-then-write save caught half-way, or a bad deploy, must not stop everything). A refusal
is logged problem by problem, alerted once per content (config.yaml ``alerts:``) and recorded in
the store for the dashboard until a reload is applied.
"""

from __future__ import annotations

import hashlib
import logging
import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from runner.config import yamlio
from runner.config.jobs import JobsFile, load_jobs, referenced_files
from runner.delivery.alerts import Event, Notice
from runner.errors import RunnerError
from runner.run.checks import check_jobs
from runner.safety.control import hold_path
from runner.serve.schedule import ScheduleTicker
from runner.store import Store, StoreFault, ledger
from runner.store.reloads import clear_refused, record_refused

if TYPE_CHECKING:
    from runner.delivery.background import BackgroundAlerts
    from runner.settings import Settings

Signature = tuple[tuple[str, int, int, int] | tuple[str], ...]


@dataclass(frozen=True)
class Loaded:
    jobs: JobsFile | None
    problems: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    forced: bool = False  # SIGHUP / `runner serve reload`: an operator asked for it
    digest: str = ""  # SHA-256 of the content read: a refusal is alerted once per content


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


def digest(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""  # missing or unreadable: load() says why


def says_no_jobs(path: Path) -> bool:
    """jobs.yaml says, in so many words, that there are no jobs: ``jobs: {}``."""

    try:
        data = yamlio.load_file(path)
    except RunnerError:
        return False
    return isinstance(data, dict) and data.get("jobs") == {}


def load(path: Path, default_timezone: str, settings: Settings | None = None) -> Loaded:
    """jobs.yaml parsed and validated; with ``settings``, the checks of ``runner jobs validate``
    (templates, models, skills, one-shots) become warnings: logged, never blocking the reload.
    A file without jobs is a problem unless it says ``jobs: {}``."""
    content = digest(path)
    try:
        own = settings.own_tool_names if settings is not None else None
        jobs = load_jobs(path, default_timezone=default_timezone, own_tools=own)
    except RunnerError as exc:
        return Loaded(None, tuple(str(exc).splitlines()), digest=content)
    if not jobs.jobs and not says_no_jobs(path):
        problem = f"{path}: no jobs (an empty or cut-short file?); to stop every job, say so: jobs: {{}}"
        return Loaded(None, (problem,), digest=content)
    if settings is None:
        return Loaded(jobs, (), digest=content)

    return Loaded(jobs, (), tuple(check_jobs(jobs, settings, now=datetime.now(UTC))), digest=content)


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
        carried = False  # a forced reload whose read met a write in progress
        while not self._stopped.is_set():
            forced = self._poke.wait(self.interval) or carried
            self._poke.clear()
            if self._stopped.is_set():
                return
            sig = signature(self._files)
            if sig == self._sig and not forced:
                continue
            before = signature([self.path])  # jobs.yaml as it is before the read
            result = load(self.path, self.default_timezone, self.settings)
            files = referenced_files(result.jobs) if result.jobs is not None else self._files
            after = signature(files)
            if signature([self.path]) != before:
                # jobs.yaml was written while it was read (``write_text`` truncates first, and an
                # empty file is valid: no jobs): what was read may be half a file. Nothing is
                # installed and the signature is left as it was, so the next look reads it again.
                carried = forced
                continue
            carried = False
            self._files, self._sig = files, after
            self.results.put(replace(result, forced=forced))
            self.wake()


class ReloadTicker:
    """Installs what the watcher loaded, on the main loop.

    A change is applied only once every run that was running when it arrived has ended (one of
    them may have made it), and not at all while a run that changed the control files left the
    reload hold (``RUNNER_HOME/run/reload.hold``): then only an operator's reload (SIGHUP,
    ``runner serve reload``) installs jobs.yaml, and clears the hold."""

    name = "reload"

    def __init__(
        self,
        watcher: JobsWatcher,
        schedule: ScheduleTicker,
        log: logging.Logger,
        home: Path | None = None,
        *,
        alerts: BackgroundAlerts | None = None,
    ):
        self.watcher, self.schedule, self.log, self.home = watcher, schedule, log, home
        self.alerts = alerts
        self._pending: Loaded | None = None
        self._waiting_for: set[str] = set()
        self._unapplied: Loaded | None = None  # its install met a store fault: installed at the next tick
        self._refused: str | None = None  # the digest of the content refused (and alerted) last

    def tick(self, now: datetime) -> None:
        if self._unapplied is not None:
            result, self._unapplied = self._unapplied, None
            self._apply(result, now)
        while True:
            try:
                result = self.watcher.results.get_nowait()
            except queue.Empty:
                break
            if result.forced:
                self._pending, self._waiting_for = None, set()
                self._release_hold()
                self._apply(result, now)
            else:
                self._pending = result
                self._waiting_for |= self._running()
        if self._pending is not None and not (self._waiting_for & self._running()):
            result, self._pending, self._waiting_for = self._pending, None, set()
            if not self._held(result):
                self._apply(result, now)

    def _running(self) -> set[str]:
        return ledger.running_ids(self.schedule.store)

    def _held(self, result: Loaded) -> bool:
        if self.home is None or not hold_path(self.home).exists():
            return False
        why = hold_path(self.home).read_text(errors="replace").strip()
        self.log.error(
            "jobs.yaml changed, but a run changed the runner's control files (%s); still running the last "
            "jobs an operator loaded. Check the files, then: runner serve reload",
            why,
        )
        return True

    def _release_hold(self) -> None:
        if self.home is not None and hold_path(self.home).exists():
            hold_path(self.home).unlink(missing_ok=True)
            self.log.warning("reload forced by an operator: the reload hold is cleared")

    def _apply(self, result: Loaded, now: datetime) -> None:
        for warning in result.warnings:
            self.log.error("%s", warning)
        if result.jobs is None:
            self._refuse(result, now)
            return
        try:
            change = self.schedule.set_jobs(result.jobs.jobs, now)
        except StoreFault:
            self._unapplied = result  # the store cannot answer: installed once it can
            raise
        self.log.info("reloaded %s: %d jobs (%s)", result.jobs.path, len(result.jobs.jobs), change)
        self._refused = None
        self._store_note(clear_refused)

    def _refuse(self, result: Loaded, now: datetime) -> None:
        """Keep the last good jobs; log every problem; alert once per content; note it for the dashboard."""

        self.log.error("jobs.yaml reload refused; still running the last good jobs:")
        for problem in result.problems:
            self.log.error("  %s", problem)
        first = result.problems[0] if result.problems else "jobs.yaml could not be read"
        more = len(result.problems) - 1
        shown = first + (f" (and {more} more problem{'s' if more > 1 else ''})" if more > 0 else "")
        if result.digest != self._refused or not result.digest:
            self._refused = result.digest
            if self.alerts is not None:
                self.alerts.notice(
                    Notice(
                        Event.RELOAD_REFUSED,
                        shown,
                        key=f"serve:reload_refused:{result.digest}",
                        note="serve keeps running the last good jobs until a reload it can apply",
                        hint="runner jobs validate",
                    )
                )
        self._store_note(lambda store: record_refused(store, problem=shown, digest=result.digest, now=now))

    def _store_note(self, write: Callable[[Store], None]) -> None:
        """The dashboard's note of a refused reload; a store that cannot take it now is logged
        (the note is for people, the reload's outcome stands)."""
        try:
            write(self.schedule.store)
        except StoreFault as exc:
            if not exc.transient:
                raise
            self.log.warning("cannot note the reload in the store: %s", exc)

    def next_wake(self, now: datetime) -> datetime | None:
        return None

    def close(self) -> None:
        self.watcher.stop()
