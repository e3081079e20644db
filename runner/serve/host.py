"""What serve's loops plug into: the clock, the ``Ticker`` protocol and the ``ServeHost`` a loop is built from.

The daemon (daemon.py) drives tickers; the composition root (cli/serve.py) decides which loops exist.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from runner.clock import utcnow
from runner.forks import WarmForks
from runner.settings import Settings
from runner.store import Store


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


TickerFactory = Callable[[ServeHost], Ticker]
