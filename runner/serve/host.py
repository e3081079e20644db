"""What serve's loops plug into: the clock, the ``Ticker`` protocol and the ``ServeHost`` a loop is built
from; and the ``RemoteExecutor`` seam (runs executed past this machine, ``runner.dist``).

The daemon (daemon.py) drives tickers; the composition root (cli/serve.py) decides which loops exist.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from runner.clock import utcnow
from runner.run.forks import WarmForks
from runner.settings import Settings
from runner.store import Store

if TYPE_CHECKING:
    from runner.config.jobs import Job
    from runner.serve.launcher import Spawner
    from runner.serve.pool import Pool

COMMIT_CHECK_S = 0.1  # how often serve looks (PRAGMA data_version) whether another process committed to
# runner.db: triggers, cancels, kanban changes. Every 50 ms cost an idle serve ~1% of a core in wake-ups.


class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    def now(self) -> datetime:
        return utcnow()


class Ticker(Protocol):
    name: str

    def tick(self, now: datetime) -> None: ...

    def next_wake(self, now: datetime) -> datetime | None: ...

    def close(self) -> None: ...


@dataclass
class ServeHost:
    """What a loop added to serve gets to work with."""

    settings: Settings
    store: Store
    clock: Clock
    log: logging.Logger
    wake: Callable[[], None] = field(repr=False)
    forks: WarmForks | None = field(default=None, repr=False)  # serve's warm forkserver (kanban workers fork from it)
    # the jobs serve has loaded now (not ``settings.jobs``: a second parse of jobs.yaml, held for good)
    jobs: Callable[[], Mapping[str, Job]] = field(default=dict, repr=False)


TickerFactory = Callable[[ServeHost], Ticker]


class RemoteExecutor(Protocol):
    """Where serve's runs execute when not in its own worker processes (``executor: celery``,
    ``runner.dist.remote``): the pool's spawner, the runs to follow after a takeover, its tickers."""

    @property
    def spawner(self) -> Spawner: ...

    def follow(self, pool: Pool, jobs: Mapping[str, Job]) -> int:
        """Have ``pool`` follow the runs remote workers hold now; return how many."""
        ...

    def tickers(self) -> list[Ticker]: ...

    def close(self) -> None: ...


ExecutorFactory = Callable[[Settings, Store, logging.Logger], RemoteExecutor]
