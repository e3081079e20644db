"""Runs started by events (issue 34): inbound webhooks and chained jobs.

- ``hook_deliveries``: one row per accepted webhook delivery, keyed by the job and the sender's
  delivery id (``X-GitHub-Delivery`` / ``X-Runner-Delivery``): a second delivery with the same id
  starts nothing and is answered with the first one's run.
- ``hook_inputs``: what a run started by an event is given for its prompt: the webhook's payload
  (the raw body, at most the size cap) and the safe subset of its headers (JSON), read by the
  run's own process (``{{ trigger.payload }}``, ``{{ trigger.headers }}``). Never the secret or the
  signature.
- ``hook_chain_links``: one row per (upstream run, downstream job) serve started a chained run for
  (``after:``), written in the transaction that opens the downstream run: the primary key makes
  each upstream ending start its downstream job at most once, across restarts and two serves.
- ``hook_chain_sight``: when serve first saw each ``after:`` edge; upstream runs that ended
  before it start nothing (adding ``after:`` does not replay history).
"""

from __future__ import annotations

from typing import Any

STATEMENTS = [
    """
    CREATE TABLE hook_deliveries (
        job TEXT NOT NULL,
        delivery TEXT NOT NULL,
        run_id TEXT NOT NULL,
        received_at TEXT NOT NULL,
        PRIMARY KEY (job, delivery)
    )
    """,
    "CREATE INDEX hook_deliveries_received ON hook_deliveries(received_at)",
    """
    CREATE TABLE hook_inputs (
        run_id TEXT PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
        kind TEXT NOT NULL,
        payload TEXT NOT NULL DEFAULT '',
        headers TEXT NOT NULL DEFAULT '{}'
    )
    """,
    """
    CREATE TABLE hook_chain_links (
        upstream_run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        job TEXT NOT NULL,
        run_id TEXT NOT NULL,
        created_at TEXT NOT NULL,
        PRIMARY KEY (upstream_run_id, job)
    )
    """,
    "CREATE INDEX hook_chain_links_run ON hook_chain_links(run_id)",
    """
    CREATE TABLE hook_chain_sight (
        job TEXT NOT NULL,
        upstream TEXT NOT NULL,
        since TEXT NOT NULL,
        PRIMARY KEY (job, upstream)
    )
    """,
]


def apply(db: Any) -> None:
    for statement in STATEMENTS:
        db.execute(statement)
