"""Where things are: RUNNER_HOME, jobs.yaml and config.yaml, resolved once per command.

config.yaml is the first of: ``--config PATH``, ``$RUNNER_CONFIG`` (both must exist), the
config.yaml beside jobs.yaml (the project's, as ``runner init`` writes it), and
``RUNNER_HOME/config.yaml`` (absent: the environment's defaults). ``config_location``
(runner/locations.py, standard library only) is that rule, for ``Settings`` and for the start-up
scan of ``runner.host.secrets``.

A ``Settings`` is built complete: config.yaml and the store are read on first use, or given when
it is made (``loaded_config``: a config.yaml already parsed, as serve's forkserver keeps it;
``opened_store``: a store the caller opened and closes). Nothing sets them from outside."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.errors import UsageError
from runner.locations import ConfigSource, config_location, default_home, default_jobs_path

if TYPE_CHECKING:
    from runner.config.database import Target
    from runner.config.jobs import JobsFile
    from runner.config.machine import Config
    from runner.config.tooldirs import Loaded
    from runner.store import Store

HOME_SUBDIRS = ("outputs", "logs", "skills", "workspaces", "run")


@dataclass
class Settings:
    home: Path
    jobs_path: Path
    config_path: Path
    config_given: bool = False  # --config or RUNNER_CONFIG: a missing file is an error, not "use defaults"
    config_source: ConfigSource = ConfigSource.HOME
    loaded_config: Config | None = field(default=None, repr=False)
    opened_store: Store | None = field(default=None, repr=False)

    @classmethod
    def from_options(cls, *, jobs: str | None = None, config: str | None = None, home: str | None = None) -> Settings:
        home_path = Path(home).expanduser() if home else default_home()
        jobs_path = Path(jobs).expanduser() if jobs else default_jobs_path()
        config_path, source = config_location(config, jobs_path, home_path)
        return cls(
            home=home_path.absolute(),
            jobs_path=jobs_path.absolute(),
            config_path=config_path,
            config_given=source in (ConfigSource.OPTION, ConfigSource.ENV),
            config_source=source,
        )

    def config_origin(self) -> str:
        """Where config.yaml is and why, for ``runner doctor``: ``/p/config.yaml (beside jobs.yaml)``."""
        if self.config_path.exists() or self.config_given:
            return f"{self.config_path} ({self.config_source})"
        return f"{self.config_path} (absent: env defaults; none beside {self.jobs_path} either)"

    def ensure_home(self) -> Path:
        """Create RUNNER_HOME (0700) and its folders; return it. A home that cannot be made or
        used (``--home /proc/self``) is bad input: exit 2, one line."""
        try:
            self.home.mkdir(parents=True, exist_ok=True)
            os.chmod(self.home, 0o700)
            for name in HOME_SUBDIRS:
                (self.home / name).mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            raise UsageError(
                f"runner home {self.home}: cannot use it as the state folder: {exc.strerror or exc} "
                "(set --home or RUNNER_HOME to a folder you own)"
            ) from None
        return self.home

    def replace(self, **changes: Any) -> Settings:
        """A copy with ``changes`` (e.g. ``opened_store=``), built complete like any other."""
        return dataclasses.replace(self, **changes)

    @cached_property
    def config(self) -> Config:
        if self.loaded_config is not None:
            return self.loaded_config
        from runner.config.machine import load_config
        if self.config_given and not self.config_path.exists():
            given = self.config_source if self.config_source is ConfigSource.ENV else ConfigSource.OPTION
            raise UsageError(f"{self.config_path}: config file not found ({given})")
        return load_config(self.config_path)

    @cached_property
    def jobs(self) -> JobsFile:
        from runner.config.jobs import load_jobs

        return load_jobs(self.jobs_path, default_timezone=self.config.timezone, own_tools=self.own_tool_names)

    def tool_dirs(self) -> tuple[Path, ...]:
        """The operator's tools folders: ``tools/`` beside jobs.yaml and config.yaml's ``tools_dirs``."""
        from runner.config.tooldirs import tool_dirs

        return tool_dirs(self.jobs_path, self.config_path, self.config.tools_dirs)

    def own_tools(self) -> Loaded:
        """The operator's tools, loaded afresh (their files run each time: no process-wide cache)."""
        from runner.config.tooldirs import load_own

        return load_own(self.tool_dirs())

    def own_tool_names(self) -> set[str]:
        loaded = self.own_tools()
        return {e.name for e in loaded.entries} | {e.toolset for e in loaded.entries}

    @property
    def state_dirs(self) -> tuple[Path, ...]:
        """Folders whose files show runs happened in this RUNNER_HOME (an empty ledger beside them is refused)."""
        return (self.home / "outputs", self.home / "logs" / "runs")

    @property
    def database(self) -> Target:
        """Where the store is: ``RUNNER_DATABASE_URL``, config.yaml's ``database:``, else
        RUNNER_HOME/runner.db (read without loading config.yaml when the environment names it)."""
        from runner.config.database import ENV, configured

        if os.environ.get(ENV, "").strip():
            return configured(self.home, None)
        return configured(self.home, self.config.database if self._mentions_database() else None)

    def _mentions_database(self) -> bool:
        """config.yaml may set ``database:`` (a command that does not otherwise need config.yaml
        does not parse it, and so does not pay for its validation, when the word is absent)."""
        try:
            return "database" in self.config_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return False

    def open_store(self, *, migrate: bool = True) -> Store:
        """Open this RUNNER_HOME's store (SQLite file or PostgreSQL, see ``database``)."""
        from runner.store import Store

        return Store.open(self.database, migrate=migrate, state=self.state_dirs)

    def has_store(self) -> bool:
        """Whether a store exists already (a SQLite file; a PostgreSQL database always does)."""
        if not os.environ.get("RUNNER_DATABASE_URL", "").strip() and not self._mentions_database():
            return (self.home / "runner.db").exists()  # the default, without importing the parser
        target = self.database
        return target.path is None or target.path.exists()

    @cached_property
    def store(self) -> Store:
        """The store: ``opened_store`` if given, else opened (and migrated) here, runs left
        ``running`` by a dead worker recovered and alerted."""
        if self.opened_store is not None:
            return self.opened_store
        from runner.store import ledger

        self.ensure_home()
        store = self.open_store()
        lost = ledger.recover_orphans(store)
        if lost:
            self.alert_lost(store, lost)
        return store

    def alert_lost(self, store: Store, run_ids: list[str]) -> None:
        """Alert each run found ``unknown`` (its worker died); jobs.yaml may be absent or broken here,
        then config.yaml's ``alerts:`` apply."""
        from runner.delivery.alerts import alert_lost
        try:
            jobs = self.jobs.jobs
        except UsageError:
            jobs = {}
        base = self.jobs_path.parent
        alert_lost(store, self.config, run_ids, jobs, home=self.home, base_dir=base)
