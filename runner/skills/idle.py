"""When the Curator runs by itself: the idle trigger that ``runner serve`` ticks.

``CuratorTicker(settings).tick(now)`` runs a pass only when every condition holds: the curator is
enabled in config, not paused, the last pass was at least ``interval_hours`` ago, no run is
queued or running, and the last run ended at least ``min_idle_hours`` ago. The first tick that
finds no previous pass only records the time (so a fresh install waits a full interval). Each
tick is two small queries on the runs table; a pass takes seconds, so serve may tick from a
worker thread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from runner.clock import parse_iso
from runner.errors import RunnerError
from runner.skills import curator
from runner.skills.curator import PassResult
from runner.store import Store, ledger

if TYPE_CHECKING:
    from runner.config.machine import CuratorConfig
    from runner.settings import Settings


@dataclass(frozen=True)
class CuratorTick:
    action: str  # disabled | paused | seeded | waiting | busy | ran | failed
    reason: str
    result: PassResult | None = None


@dataclass(frozen=True)
class IdleStatus:
    enabled: bool
    paused: bool
    last_pass_at: datetime | None
    seeded: bool  # last_pass_at is when serve first looked, not a real pass
    active_runs: int
    last_run_ended_at: datetime | None
    next_eligible_at: datetime | None  # None: never (disabled, paused) or not yet seeded

    def idle_for(self, now: datetime) -> timedelta | None:
        """How long nothing has run (None while a run is active or when no run ever ended)."""
        if self.active_runs or self.last_run_ended_at is None:
            return None
        return now - self.last_run_ended_at


def idle_status(store: Store, cfg: CuratorConfig, now: datetime) -> IdleStatus:
    st = curator.state(store)
    n_active, ended_at = ledger.activity(store)
    last_pass = parse_iso(st["last_pass_at"])
    last_end = parse_iso(ended_at)
    next_at = None
    if cfg.enabled and not st["paused"] and last_pass is not None:
        next_at = last_pass + timedelta(hours=cfg.interval_hours)
        if last_end is not None:
            next_at = max(next_at, last_end + timedelta(hours=cfg.min_idle_hours))
    return IdleStatus(
        enabled=cfg.enabled,
        paused=bool(st["paused"]),
        last_pass_at=last_pass,
        seeded=bool(st["seeded"]),
        active_runs=n_active,
        last_run_ended_at=last_end,
        next_eligible_at=next_at,
    )


class CuratorTicker:
    """The idle Curator, as an object ``runner serve`` calls with ``tick(now)``."""

    def __init__(
        self,
        settings: Settings,
        *,
        run: Callable[..., PassResult] = curator.run_pass,
    ):
        self.settings = settings
        self.run = run

    def tick(self, now: datetime) -> CuratorTick:
        cfg = self.settings.config.curator
        store = self.settings.store
        if not cfg.enabled:
            return CuratorTick("disabled", "curator.enabled is false in config")
        status = idle_status(store, cfg, now)
        if status.paused:
            return CuratorTick("paused", "paused with `runner curator pause`")
        if status.last_pass_at is None:
            curator.mark_pass(store, now, seeded=True)
            return CuratorTick("seeded", "no previous pass: recorded the time; the first pass waits a full interval")
        due = status.last_pass_at + timedelta(hours=cfg.interval_hours)
        if now < due:
            return CuratorTick("waiting", f"last pass {status.last_pass_at.isoformat()}; next due {due.isoformat()}")
        if status.active_runs:
            return CuratorTick("busy", f"{status.active_runs} run(s) queued or running")
        if status.last_run_ended_at is not None:
            idle_from = status.last_run_ended_at + timedelta(hours=cfg.min_idle_hours)
            if now < idle_from:
                return CuratorTick(
                    "waiting",
                    f"a run ended at {status.last_run_ended_at.isoformat()}; idle from {idle_from.isoformat()}",
                )
        try:
            result = self.run(self.settings, now=now, trigger="idle")
        except RunnerError as exc:  # recorded in curator_runs and returned; serve keeps going
            curator.mark_pass(store, now)
            return CuratorTick("failed", str(exc))
        return CuratorTick("ran", result.summary(), result)
