"""Runs started by events, in the store (m0027): webhook deliveries and chained jobs.

A webhook's run is written by the process that answered the POST (``runner web`` or ``serve
--web``): in one transaction, the duplicate check, the job's queue check (its ``overlap:``), the
``queued`` ledger row (trigger ``webhook``), the payload for its prompt, the delivery id and a
trigger request (``control_requests``, with the run id) that serve's schedule ticker takes and
hands to its pool, so the run goes through serve's pool and policies like ``runner jobs trigger``.

A chained run (``after:``) is written by serve: for each upstream run that ended as the edge's
``when`` asks, one ``hook_chain_links`` row and the downstream ``queued`` row (trigger ``chain``)
in one transaction; the link's primary key makes it once per upstream run, across restarts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from runner.clock import iso
from runner.statuses import ACTIVE, ChainWhen, ControlKind, RunStatus, Trigger
from runner.store import Store, ledger
from runner.store.control import new_id
from runner.store.files import FileKind, read

#: the statuses each ``when:`` starts the downstream job on
WHEN_STATUSES: dict[ChainWhen, tuple[RunStatus, ...]] = {
    ChainWhen.SUCCESS: (RunStatus.SUCCEEDED,),
    ChainWhen.FAILURE: (RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.INTERRUPTED, RunStatus.UNKNOWN),
    ChainWhen.ALWAYS: (
        RunStatus.SUCCEEDED,
        RunStatus.FAILED,
        RunStatus.TIMED_OUT,
        RunStatus.INTERRUPTED,
        RunStatus.UNKNOWN,
    ),
}
#: an upstream run that ended longer ago than this (serve was down for longer) starts nothing
CHAIN_LOOKBACK = timedelta(days=1)


@dataclass(frozen=True)
class Accepted:
    """A delivery that has its run: ``duplicate`` when an earlier delivery with its id made it."""

    run_id: str
    duplicate: bool = False


@dataclass(frozen=True)
class QueueFull:
    """The job's ``overlap:`` takes no more runs now (``busy``: the run that holds the place)."""

    busy: str


def accept_delivery(
    store: Store,
    *,
    job: str,
    delivery: str,
    overlap: str,
    payload: str,
    headers: Mapping[str, str],
    now: datetime,
) -> Accepted | QueueFull:
    """Record a verified webhook delivery and queue its run, or say why not, in one transaction
    (``BEGIN IMMEDIATE``: two deliveries at once are decided one after the other)."""
    with store.transaction() as conn:
        seen = conn.execute(
            "SELECT run_id FROM hook_deliveries WHERE job=? AND delivery=?", (job, delivery)
        ).fetchone()
        if seen is not None:
            return Accepted(str(seen[0]), duplicate=True)
        busy = _busy(conn, job, overlap)
        if busy is not None:
            return QueueFull(busy)
        run_id = ledger.open_run(store, job=job, trigger=Trigger.WEBHOOK, status=RunStatus.QUEUED, now=now)
        conn.execute(
            "INSERT INTO hook_inputs (run_id, kind, payload, headers) VALUES (?, ?, ?, ?)",
            (run_id, Trigger.WEBHOOK, payload, json.dumps(dict(headers), sort_keys=True)),
        )
        conn.execute(
            "INSERT INTO hook_deliveries (job, delivery, run_id, received_at) VALUES (?, ?, ?, ?)",
            (job, delivery, run_id, iso(now)),
        )
        conn.execute(
            "INSERT INTO control_requests (id, kind, job, run_id, requested_by, requested_at) VALUES (?, ?, ?, ?, ?, ?)",
            (new_id("t"), ControlKind.TRIGGER, job, run_id, "webhook", iso(now)),
        )
    return Accepted(run_id)


def _busy(conn: Any, job: str, overlap: str) -> str | None:
    """The run that leaves no place for one more under ``overlap`` (what serve's pool would do with
    it: ``skip`` takes none while one is queued or running, ``queue`` one waiting behind a running
    one; ``allow`` and ``replace`` always take it), or None."""
    if overlap in ("allow", "replace"):
        return None
    statuses = (RunStatus.QUEUED,) if overlap == "queue" else tuple(ACTIVE)
    marks = ", ".join("?" * len(statuses))
    row = conn.execute(
        f"SELECT id FROM runs WHERE job=? AND status IN ({marks}) AND parent_run_id IS NULL LIMIT 1",
        (job, *statuses),
    ).fetchone()
    return str(row[0]) if row is not None else None


@dataclass(frozen=True)
class HookInput:
    """What an event gave run ``run_id`` for its prompt (untrusted data)."""

    kind: Trigger
    payload: str
    headers: dict[str, str]


def hook_input(store: Store, run_id: str) -> HookInput | None:
    row = store.one("SELECT kind, payload, headers FROM hook_inputs WHERE run_id=?", (run_id,))
    if row is None:
        return None
    return HookInput(Trigger(row["kind"]), str(row["payload"]), dict(json.loads(row["headers"] or "{}")))


# -- chains -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Upstream:
    """The upstream run a chained run was started by (``{{ upstream.JOB.* }}``)."""

    job: str
    run_id: str
    status: str
    output: str


def see_edges(store: Store, edges: Sequence[tuple[str, str]], *, now: datetime) -> None:
    """Record when each (downstream job, upstream job) edge was first seen (kept on later calls)."""
    if not edges:
        return
    with store.transaction() as conn:
        for job, upstream in edges:
            conn.execute(
                "INSERT OR IGNORE INTO hook_chain_sight (job, upstream, since) VALUES (?, ?, ?)",
                (job, upstream, iso(now)),
            )


def due_chains(
    store: Store, job: str, upstreams: Sequence[str], when: ChainWhen, *, now: datetime
) -> list[tuple[str, str]]:
    """(upstream run id, upstream job) of the runs of ``upstreams`` that ended as ``when`` asks,
    after the edge was first seen (and within ``CHAIN_LOOKBACK``), that started no run of ``job``
    yet; oldest first. Subagents' rows are not the job's runs."""
    if not upstreams:
        return []
    statuses = WHEN_STATUSES[when]
    jobs_marks = ", ".join("?" * len(upstreams))
    status_marks = ", ".join("?" * len(statuses))
    rows = store.query(
        "SELECT u.id, u.job FROM runs u JOIN hook_chain_sight s ON s.job = ? AND s.upstream = u.job "
        f"WHERE u.job IN ({jobs_marks}) AND u.status IN ({status_marks}) AND u.parent_run_id IS NULL "
        "AND u.ended_at >= s.since AND u.ended_at >= ? "
        "AND NOT EXISTS (SELECT 1 FROM hook_chain_links l WHERE l.upstream_run_id = u.id AND l.job = ?) "
        "ORDER BY u.ended_at, u.id",
        (job, *upstreams, *statuses, iso(now - CHAIN_LOOKBACK), job),
    )
    return [(str(r["id"]), str(r["job"])) for r in rows]


def open_chained(store: Store, *, job: str, upstream_run_id: str, now: datetime) -> str | None:
    """The downstream ``queued`` row (trigger ``chain``) and its link, in one transaction; None
    when another process (or an earlier pass) linked this upstream run to ``job`` first."""
    with store.transaction() as conn:
        taken = conn.execute(
            "SELECT run_id FROM hook_chain_links WHERE upstream_run_id=? AND job=?", (upstream_run_id, job)
        ).fetchone()
        if taken is not None:
            return None
        run_id = ledger.open_run(store, job=job, trigger=Trigger.CHAIN, status=RunStatus.QUEUED, now=now)
        conn.execute(
            "INSERT INTO hook_chain_links (upstream_run_id, job, run_id, created_at) VALUES (?, ?, ?, ?)",
            (upstream_run_id, job, run_id, iso(now)),
        )
    return run_id


def upstream_of(store: Store, run_id: str) -> Upstream | None:
    """The upstream run that started chained run ``run_id`` (its output as written: the caller
    redacts and caps it), or None."""
    row = store.one(
        "SELECT u.id, u.job, u.status, u.output_path FROM hook_chain_links l JOIN runs u ON u.id = l.upstream_run_id "
        "WHERE l.run_id=?",
        (run_id,),
    )
    if row is None:
        return None
    output = ""
    if row["output_path"]:
        try:
            output = read(store, row["id"], FileKind.OUTPUT, row["output_path"])
        except OSError:
            output = ""
    return Upstream(str(row["job"]), str(row["id"]), str(row["status"]), output)
