"""``/metrics``: Prometheus text, read from the store at each scrape, in a registry of this app's
own (never prometheus_client's global one, so two apps in a process or a test do not collide)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

from runner.agent.credentials import list_credentials
from runner.clock import utcnow
from runner.serve.state import serve_status
from runner.store.lease import lease_holder

if TYPE_CHECKING:
    from runner.store import Store

DURATION_BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0)
LATENESS_BUCKETS = (0.1, 0.5, 1.0, 5.0, 30.0, 300.0)


def _histogram(store: Store, expr: str, where: str, buckets: tuple[float, ...]) -> list[dict[str, Any]]:
    """Per job: cumulative bucket counts, sum and count of ``expr`` over the rows of ``where``."""
    # CASE, not SUM(v <= b), and a named subquery: the same text on SQLite and PostgreSQL
    cases = ", ".join(f"SUM(CASE WHEN v <= {b} THEN 1 ELSE 0 END) AS b{i}" for i, b in enumerate(buckets))
    return store.query(
        f"SELECT job, COUNT(*) AS n, COALESCE(SUM(v), 0) AS total, {cases} "
        f"FROM (SELECT job, {expr} AS v FROM runs WHERE {where}) AS finished GROUP BY job"
    )


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
        for r in self.store.query(
            "SELECT job, status, COUNT(*) AS n, COALESCE(SUM(prompt_tokens), 0) AS p, "
            "COALESCE(SUM(completion_tokens), 0) AS c, COALESCE(SUM(cost_usd), 0) AS usd "
            "FROM runs WHERE parent_run_id IS NULL GROUP BY job, status"
        ):
            runs.add_metric([r["job"], r["status"]], r["n"])
        for r in self.store.query(
            "SELECT job, COALESCE(SUM(prompt_tokens), 0) AS p, COALESCE(SUM(completion_tokens), 0) AS c, "
            "COALESCE(SUM(cost_usd), 0) AS usd FROM runs WHERE parent_run_id IS NULL GROUP BY job"
        ):
            tokens.add_metric([r["job"], "prompt"], r["p"])
            tokens.add_metric([r["job"], "completion"], r["c"])
            cost.add_metric([r["job"]], r["usd"])
        yield from (runs, tokens, cost)

    def _histograms(self) -> Iterator[Any]:
        from prometheus_client.core import HistogramMetricFamily

        for name, doc, expr, where, buckets in (
            (
                "runner_run_duration_seconds",
                "Duration of finished runs",
                "(julianday(ended_at) - julianday(started_at)) * 86400.0",
                "ended_at IS NOT NULL AND started_at IS NOT NULL AND parent_run_id IS NULL",
                DURATION_BUCKETS,
            ),
            (
                "runner_fire_lateness_seconds",
                "How long a scheduled fire waited for a slot (waited_s)",
                "waited_s",
                "waited_s IS NOT NULL",
                LATENESS_BUCKETS,
            ),
        ):
            family = HistogramMetricFamily(name, doc, labels=["job"])
            for r in _histogram(self.store, expr, where, buckets):
                counts = [(str(b), r[f"b{i}"] or 0) for i, b in enumerate(buckets)]
                family.add_metric([r["job"]], [*counts, ("+Inf", r["n"])], r["total"])
            yield family

    def _queue(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        row = self.store.one("SELECT COUNT(*) AS n FROM runs WHERE status = 'queued'")
        yield GaugeMetricFamily("runner_queue_depth", "Runs queued, waiting for a worker", value=row["n"] if row else 0)

    def _kanban(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        family = GaugeMetricFamily("runner_kanban_tasks", "Kanban tasks by status", labels=["status"])
        for r in self.store.query("SELECT status, COUNT(*) AS n FROM tasks GROUP BY status"):
            family.add_metric([r["status"]], r["n"])
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
