"""A run's fleet budget: which caps of config.yaml's ``budgets:`` apply to it and what it reserves.

Planned before the ledger row (a job that would have to reserve without a maximum is exit 2);
reserved by the run before its first model call; settled by ``ledger.finish`` at its end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runner.clock import utcnow
from runner.config.jobfile import Job
from runner.errors import ConfigError
from runner.events import Budget
from runner.store import Store
from runner.store.budget import Cap, Hold, Period, Refusal, Scope, open_reservations, periods, reserve, to_micro, totals

if TYPE_CHECKING:
    from runner.config.machine import Caps, Config


@dataclass(frozen=True)
class BudgetPlan:
    job: str
    providers: tuple[str, ...]  # every provider the run may call (its model list, its auxiliary model)
    amount_usd: float  # reserved; the run stops (with a partial answer) when it has spent it; 0: no maximum
    caps: tuple[Cap, ...]

    def reserve(self, store: Store, run_id: str) -> Refusal | None:
        hold = Hold(run_id, self.job, self.providers, to_micro(self.amount_usd), self.caps)
        return reserve(store, hold)

    def as_event(self, refusal: Refusal | None = None) -> Budget:
        cap, detail = (refusal.cap.label(), refusal.describe()) if refusal is not None else (None, None)
        return Budget(self.amount_usd, list(self.providers), [c.label() for c in self.caps], cap, detail)


def _caps(scope: Scope, name: str, caps: Caps | None) -> list[Cap]:
    if caps is None:
        return []
    out = []
    if caps.daily_usd is not None:
        out.append(Cap(scope, name, Period.DAY, to_micro(caps.daily_usd)))
    if caps.monthly_usd is not None:
        out.append(Cap(scope, name, Period.MONTH, to_micro(caps.monthly_usd)))
    return out


def plan(config: Config, job: Job, providers: tuple[str, ...]) -> BudgetPlan:
    """The caps that apply to ``job`` calling ``providers`` and the amount its runs reserve: the job's
    ``budget.max_cost_usd``, else ``budgets.default_run_usd``; with a cap and neither, exit 2."""
    budgets = config.budgets
    caps = _caps(Scope.FLEET, "", budgets) + _caps(Scope.JOB, job.name, budgets.jobs.get(job.name))
    for provider in providers:
        caps += _caps(Scope.PROVIDER, provider, budgets.providers.get(provider))
    amount = job.spec.budget.max_cost_usd
    if amount is None:
        amount = budgets.default_run_usd
    if amount is None and caps:
        raise ConfigError(
            f"job {job.name}: budget.max_cost_usd is not set and config.yaml has no budgets.default_run_usd: "
            f"a run under a cost cap ({caps[0].label()}) must reserve its maximum cost; set one of them"
        )
    return BudgetPlan(job.name, providers, amount or 0.0, tuple(caps))


# -- the report of ``runner budget`` ------------------------------------------------------------------
def report(store: Store, config: Config) -> dict[str, Any]:
    """Spend and open reservations today and this month (UTC) per scope, with the caps that apply."""

    now = utcnow()
    when = periods(now)
    budgets = config.budgets
    configured: dict[tuple[str, str], Caps] = {(Scope.FLEET, ""): budgets}
    configured.update({(Scope.PROVIDER, p): c for p, c in budgets.providers.items()})
    configured.update({(Scope.JOB, j): c for j, c in budgets.jobs.items()})
    rows: dict[tuple[str, str], dict[str, Any]] = {}

    def entry(scope: str, name: str) -> dict[str, Any]:
        caps = configured.get((scope, name))
        return rows.setdefault(
            (scope, name),
            {
                "scope": scope,
                "name": name,
                "today": {"spent_usd": 0.0, "reserved_usd": 0.0, "cap_usd": caps.daily_usd if caps else None},
                "month": {"spent_usd": 0.0, "reserved_usd": 0.0, "cap_usd": caps.monthly_usd if caps else None},
            },
        )

    for scope, name in configured:
        entry(scope, name)
    for t in totals(store, now=now):
        part = entry(t["scope"], t["name"])["today" if t["period"] == Period.DAY else "month"]
        part.update(spent_usd=t["spent_usd"], reserved_usd=t["reserved_usd"])
    order = {Scope.FLEET: 0, Scope.PROVIDER: 1, Scope.JOB: 2}
    scopes = sorted(rows.values(), key=lambda r: (order[Scope(r["scope"])], r["name"]))
    return {
        "day": when[Period.DAY],
        "month": when[Period.MONTH],
        "default_run_usd": budgets.default_run_usd,
        "scopes": scopes,
        "open": open_reservations(store),
    }
