"""What runs through serve's pool: a ``Fire`` in (a queued ledger row to start), an ``ActiveRun``
while it goes, and the paths a worker is given."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from runner.config.jobfile import Job
from runner.statuses import Trigger
from runner.store.control import Vars


@dataclass(frozen=True)
class Fire:
    """A queued ledger row to run (a scheduled slot, a retry, or a queued row adopted at start)."""

    run_id: str
    job: Job
    slot: datetime | None
    trigger: Trigger = Trigger.SCHEDULE
    attempt: int = 1
    root_run: str | None = None  # the first attempt's run id (retries link to it)
    task_id: str | None = None
    batch: str | None = None  # catch-up slots of one job: run one after another, never skipped
    not_before: datetime | None = None
    vars: Vars = ()  # a trigger's template variables (``jobs trigger --var``): the run's vars_override


@dataclass(frozen=True)
class ActiveRun:
    run_id: str
    job: str
    trigger: Trigger
    pid: int
    started_at: datetime


@dataclass(frozen=True)
class Paths:
    home: str
    jobs: str
    config: str

