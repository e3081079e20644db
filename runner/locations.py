"""Where RUNNER_HOME, jobs.yaml and config.yaml are by default, and which config.yaml is read.

Standard library only, and no other runner module: ``runner.settings`` builds its ``Settings``
with these rules, and ``runner.host.secrets`` applies the same rule in its start-up scan (before
any configuration is loaded) without depending on the settings and what they open.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path


def default_home() -> Path:
    env = os.environ.get("RUNNER_HOME")
    return Path(env).expanduser() if env else Path.home() / ".runner"


def default_jobs_path() -> Path:
    env = os.environ.get("RUNNER_JOBS")
    return Path(env).expanduser() if env else Path("jobs.yaml")


class ConfigSource(StrEnum):
    """Why a config.yaml is the one read: the words ``runner doctor`` shows beside its path."""

    OPTION = "given with --config"
    ENV = "from RUNNER_CONFIG"
    PROJECT = "beside jobs.yaml"
    HOME = "in RUNNER_HOME"


def config_location(
    option: str | None, jobs_path: Path, home: Path, env: Mapping[str, str] = os.environ
) -> tuple[Path, ConfigSource]:
    """The config.yaml to read and why: ``--config``, else ``$RUNNER_CONFIG``, else the
    config.yaml beside ``jobs_path`` if there is one, else ``home/config.yaml`` (may be absent)."""
    if option:
        return Path(option).expanduser().absolute(), ConfigSource.OPTION
    named = env.get("RUNNER_CONFIG", "").strip()
    if named:
        return Path(named).expanduser().absolute(), ConfigSource.ENV
    beside = jobs_path.expanduser().absolute().parent / "config.yaml"
    if beside.exists():
        return beside, ConfigSource.PROJECT
    return home.expanduser().absolute() / "config.yaml", ConfigSource.HOME
