"""Shell completion of the values commands take: job names (read from jobs.yaml, nothing
validated) and run ids (the newest runs in the store, not migrated, nothing written).

Used as ``shell_complete=`` of a JOB argument or option and of a RUN one. The shell asks with
``_RUNNER_COMPLETE=bash_complete`` (see ``runner completion``); a completer never fails: a
missing or broken jobs.yaml or store completes nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from click.shell_completion import CompletionItem

RECENT_RUNS = 50  # run ids offered, newest first


def _root_params(ctx: click.Context) -> dict[str, Any]:
    return ctx.find_root().params


def job_names(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """The names under ``jobs:`` in the jobs.yaml this command line would read."""
    from runner.locations import default_jobs_path

    given = _root_params(ctx).get("jobs_path")
    path = Path(given).expanduser() if given else default_jobs_path()
    try:
        import yaml

        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError):
        return []
    jobs = data.get("jobs") if isinstance(data, dict) else None
    if not isinstance(jobs, dict):
        return []
    return [CompletionItem(name) for name in sorted(map(str, jobs)) if name.startswith(incomplete)]


def run_ids(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """The ids of the newest runs in this RUNNER_HOME's store, each with its job and status."""
    import sqlite3

    from runner.errors import RunnerError
    from runner.settings import Settings

    params = _root_params(ctx)
    s = Settings.from_options(jobs=params.get("jobs_path"), config=params.get("config_path"), home=params.get("home"))
    try:
        if not s.has_store():
            return []
        from runner.store.runs import list_runs

        store = s.open_store(migrate=False)
        try:
            rows = list_runs(store, limit=RECENT_RUNS)
        finally:
            store.close()
    except (RunnerError, OSError, sqlite3.Error):  # no store to read yet, or a broken one: nothing offered
        return []
    return [
        CompletionItem(r["id"], help=f"{r['job']} {r['status']}") for r in rows if str(r["id"]).startswith(incomplete)
    ]
