"""What the dashboard reads: the store, and jobs.yaml / config.yaml reloaded when they change.

A ``runner web`` lives for days, so ``Settings.jobs`` (cached once per command) is not enough:
``Source`` reloads jobs.yaml and config.yaml when their modification time changes and keeps the
last good copy's error text for the pages to show.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.config.jobs import load_jobs
from runner.config.machine import Config, load_config
from runner.errors import RunnerError

if TYPE_CHECKING:
    from runner.config.jobs import JobsFile
    from runner.settings import Settings
    from runner.store import Store


@dataclass(frozen=True)
class Loaded:
    value: Any
    error: str | None


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


class Source:
    def __init__(self, settings: Settings):
        self.settings = settings
        self._lock = threading.Lock()
        self._jobs: tuple[tuple[float | None, float | None], Loaded] | None = None
        self._config: tuple[float | None, Loaded] | None = None

    @property
    def home(self) -> Path:
        return self.settings.home

    @property
    def store(self) -> Store:
        return self.settings.store

    def config(self) -> Config:
        config: Config = self.config_loaded().value
        return config

    def config_loaded(self) -> Loaded:
        """config.yaml as it is now (value: the defaults and the error's text when it does not load)."""
        stamp = _mtime(self.settings.config_path)
        with self._lock:
            if self._config is None or self._config[0] != stamp:
                try:
                    loaded = Loaded(load_config(self.settings.config_path), None)
                except RunnerError as exc:
                    loaded = Loaded(Config(), str(exc))
                self._config = (stamp, loaded)
            return self._config[1]

    def jobs(self) -> Loaded:
        """The jobs file (value None and the error's text when it does not load)."""

        config = self.config()
        stamp = (_mtime(self.settings.jobs_path), _mtime(self.settings.config_path))
        with self._lock:
            if self._jobs is None or self._jobs[0] != stamp:
                try:
                    jf: JobsFile | None = load_jobs(
                        self.settings.jobs_path,
                        default_timezone=config.timezone,
                        own_tools=self.settings.own_tool_names,
                    )
                    loaded = Loaded(jf, None)
                except RunnerError as exc:
                    loaded = Loaded(None, str(exc))
                self._jobs = (stamp, loaded)
            return self._jobs[1]
