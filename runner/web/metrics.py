"""``/metrics``: Prometheus text, read from the store at each scrape, in a registry of this app's
own (never prometheus_client's global one, so two apps in a process or a test do not collide)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from runner.agent.credentials import list_credentials
from runner.clock import utcnow
from runner.serve.state import serve_status
from runner.store import Store
from runner.store.lease import lease_holder
from runner.store.queries import (
    Measure,
    StatusTotals,
    histograms,
    queued_count,
    task_counts,
    totals_by_status,
    waiting_count,
)

DURATION_BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0)
LATENESS_BUCKETS = (0.1, 0.5, 1.0, 5.0, 30.0, 300.0)


class StoreCollector:
    """A prometheus_client custom collector: each scrape runs a handful of GROUP BY queries."""

    def __init__(self, store: Store, now: Any = utcnow):
        self.store = store
        self.now = now

    def describe(self) -> list[Any]:
        return []  # no samples at registration (the store is read at scrape time)

    def collect(self) -> Iterator[Any]:
        yield from self._runs()
        yield from self._histograms()
        yield from self._queue()
        yield from self._kanban()
        yield from self._keys()
        yield from self._serve(self.now())

    def _runs(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        runs = GaugeMetricFamily("runner_runs", "Runs in the ledger by job and status", labels=["job", "status"])
        tokens = CounterMetricFamily("runner_tokens", "Tokens used by runs", labels=["job", "kind"])
        cost = CounterMetricFamily("runner_cost_usd", "Model cost of runs in USD", labels=["job"])
        per_job: dict[str, list[StatusTotals]] = {}
        for t in totals_by_status(self.store):
            runs.add_metric([t.job, t.status], t.runs)
            per_job.setdefault(t.job, []).append(t)
        for job, totals in sorted(per_job.items()):
            tokens.add_metric([job, "prompt"], sum(t.prompt_tokens for t in totals))
            tokens.add_metric([job, "completion"], sum(t.completion_tokens for t in totals))
            cost.add_metric([job], sum(t.cost_usd for t in totals))
        yield from (runs, tokens, cost)

    def _histograms(self) -> Iterator[Any]:
        from prometheus_client.core import HistogramMetricFamily

        for name, doc, measure, buckets in (
            ("runner_run_duration_seconds", "Duration of finished runs", Measure.DURATION, DURATION_BUCKETS),
            (
                "runner_fire_lateness_seconds",
                "How long a scheduled fire waited for a slot (waited_s)",
                Measure.LATENESS,
                LATENESS_BUCKETS,
            ),
        ):
            family = HistogramMetricFamily(name, doc, labels=["job"])
            for h in histograms(self.store, measure, buckets):
                counts = [(str(b), n) for b, n in zip(buckets, h.cumulative, strict=True)]
                family.add_metric([h.job], [*counts, ("+Inf", h.count)], h.total)
            yield family

    def _queue(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        yield GaugeMetricFamily("runner_queue_depth", "Runs queued, waiting for a worker", value=queued_count(self.store))
        yield GaugeMetricFamily(
            "runner_runs_waiting", "Runs waiting on a manual approval now", value=waiting_count(self.store)
        )

    def _kanban(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        family = GaugeMetricFamily("runner_kanban_tasks", "Kanban tasks by status", labels=["status"])
        for status, n in task_counts(self.store).items():
            family.add_metric([status], n)
        yield family

    def _keys(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        family = GaugeMetricFamily("runner_keys_cooling", "API keys cooling down, by provider", labels=["provider"])
        cooling: dict[str, int] = {}
        for c in list_credentials(self.store):
            cooling[c.provider] = cooling.get(c.provider, 0) + int(c.status == "cooling")
        for provider, n in sorted(cooling.items()):
            family.add_metric([provider], n)
        yield family

    def _serve(self, now: datetime) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        status = serve_status(self.store, now)
        up = GaugeMetricFamily("runner_serve_up", "1 when runner serve's heartbeat is fresh", value=int(status.alive))
        yield up
        if status.heartbeat_at:
            age = (now - datetime.fromisoformat(status.heartbeat_at)).total_seconds()
            yield GaugeMetricFamily(
                "runner_serve_heartbeat_age_seconds", "Seconds since serve's last heartbeat", value=max(age, 0.0)
            )
        yield from self._leader(now)

    def _leader(self, now: datetime) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        labels = ["holder", "host", "pid"]
        leads = GaugeMetricFamily(
            "runner_scheduler_leader",
            "1 while this serve holds the scheduler lease; 0 when its lease ran out and nobody took it",
            labels=labels,
        )
        since = GaugeMetricFamily(
            "runner_scheduler_leader_since_seconds",
            "Unix time the leading serve took the scheduler lease",
            labels=labels,
        )
        lead = lease_holder(self.store)
        if lead is not None:
            values = [lead.holder, lead.host, str(lead.pid)]
            leads.add_metric(values, int(lead.live(now)))
            since.add_metric(values, datetime.fromisoformat(lead.acquired_at).timestamp())
        yield from (leads, since)


def registry(store: Store) -> Any:
    from prometheus_client import CollectorRegistry

    reg = CollectorRegistry(auto_describe=False)
    reg.register(StoreCollector(store))
    return reg


def render(reg: Any) -> tuple[bytes, str]:
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return generate_latest(reg), CONTENT_TYPE_LATEST
