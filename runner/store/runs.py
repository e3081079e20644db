"""Reading the run ledger (a run, a list, its children, its events) and recording a run's events.

Every change of a run's status is runner/store/ledger.py's.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any, NamedTuple

from runner.clock import iso, utcnow
from runner.events import Emit, Event, Payload, Recorded, decode, encode
from runner.safety.redact import Redactor
from runner.statuses import RunStatus
from runner.store import Store, dumps
from runner.store.files import FileKind, read


def get_run(store: Store, run_id: str) -> dict[str, Any] | None:
    row = store.one("SELECT * FROM runs WHERE id=?", (run_id,))
    if row is None:
        matches = store.query("SELECT * FROM runs WHERE id LIKE ? LIMIT 2", (f"%{run_id}%",))
        row = matches[0] if len(matches) == 1 else None
    return row


def run_with_id(store: Store, run_id: str) -> dict[str, Any] | None:
    return store.one("SELECT * FROM runs WHERE id=?", (run_id,))


def runs_with_id_like(store: Store, pattern: str, limit: int) -> list[dict[str, Any]]:
    """Runs whose id matches the LIKE ``pattern`` (``\\`` escapes ``%`` and ``_``), newest id first."""
    return store.query("SELECT * FROM runs WHERE id LIKE ? ESCAPE '\\' ORDER BY id DESC LIMIT ?", (pattern, limit))


def list_runs(
    store: Store,
    *,
    job: str | None = None,
    status: str | None = None,
    limit: int = 20,
    delivery_failed: bool = False,
) -> list[dict[str, Any]]:
    where, params = [], []
    if delivery_failed:
        where.append("delivery_failed = 1")
    if job:
        where.append("job = ?")
        params.append(job)
    if status:
        where.append("status = ?")
        params.append(status)
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    return store.query(f"SELECT * FROM runs {clause} ORDER BY created_at DESC, id DESC LIMIT ?", (*params, limit))


def last_output(store: Store, job: str) -> str:
    row = store.one(
        "SELECT id, output_path FROM runs WHERE job=? AND status=? AND output_path IS NOT NULL "
        "AND parent_run_id IS NULL ORDER BY created_at DESC LIMIT 1",  # a subagent's summary is not the job's output
        (job, RunStatus.SUCCEEDED),
    )
    if not row:
        return ""
    try:
        return read(store, row["id"], FileKind.OUTPUT, row["output_path"])
    except OSError:
        return ""


def children(store: Store, run_id: str) -> list[dict[str, Any]]:
    """The child runs (subagents) ``run_id`` started, oldest first."""
    return store.query("SELECT * FROM runs WHERE parent_run_id=? ORDER BY created_at, id", (run_id,))


def events(store: Store, run_id: str, after: int = 0, limit: int | None = None) -> list[Recorded]:
    """The run's events after ``after``, oldest first (at most ``limit``)."""
    sql = "SELECT seq, ts, kind, payload FROM run_events WHERE run_id=? AND seq>? ORDER BY seq"
    rows = store.query(sql, (run_id, after)) if limit is None else store.query(f"{sql} LIMIT ?", (run_id, after, limit))
    return [Recorded.of(r) for r in rows]


INSERT_EVENT = "INSERT INTO run_events (run_id, seq, ts, kind, payload) VALUES (?, ?, ?, ?, ?)"


@dataclass
class Recorder:
    """Appends a run's events to run_events, redacted. Thread-safe; ``seq`` is 1, 2, 3..."""

    store: Store
    run_id: str
    redact: Redactor
    listener: Emit | None = None  # sees each event as stored, redacted (progress)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        row = self.store.one("SELECT MAX(seq) AS n FROM run_events WHERE run_id=?", (self.run_id,))
        self._seq = int(row["n"] or 0) if row else 0
        self._held: list[tuple[Any, ...]] = []

    def __call__(self, kind: Event, payload: Payload, *, hold: bool = False) -> None:
        """Append the event. ``hold``: the event takes its place (seq, time) now but is written
        with the run's next event, in the same write (a script-only run's ``pre_run`` goes with
        ``run_finished``, a few milliseconds later: one write lock fewer per run)."""
        clean = self.redact.redact_obj(encode(payload))
        with self._lock:
            self._seq += 1
            row = (self.run_id, self._seq, iso(utcnow()), kind, dumps(clean))
            if hold:
                self._held.append(row)
            elif self._held:
                rows, self._held = [*self._held, row], []
                with self.store.transaction() as conn:
                    conn.executemany(INSERT_EVENT, rows)
            else:
                self.store.execute(INSERT_EVENT, row)
        if self.listener is not None:
            self.listener(kind, decode(kind, clean)[1])


# -- bulk import -------------------------------------------------------------------------------
class RunRecord(NamedTuple):
    """A finished run as ``insert_runs`` writes it (a tuple: a million of them stay cheap)."""

    id: str
    job: str
    trigger: str
    status: str
    created_at: str
    started_at: str | None = None
    ended_at: str | None = None
    model: str | None = None
    iterations: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    reason: str | None = None
    error: str | None = None
    parent_run_id: str | None = None
    output_path: str | None = None


class EventRecord(NamedTuple):
    """One ``run_events`` row as ``insert_events`` writes it: ``payload`` is JSON text, redacted
    by the caller (the ``Recorder`` redacts live events; an import brings them redacted)."""

    run_id: str
    seq: int
    ts: str
    kind: str
    payload: str


INSERT_RUN = f"INSERT INTO runs ({', '.join(RunRecord._fields)}) VALUES ({', '.join('?' for _ in RunRecord._fields)})"
BULK_BATCH = 20_000  # rows per transaction: short write locks while serve runs beside an import


def insert_runs(store: Store, runs: Iterable[RunRecord], *, batch: int = BULK_BATCH) -> int:
    """Write finished runs in bulk (a ledger imported or made for a benchmark), ``batch`` rows per
    transaction; returns how many. Runs go in before their events (``insert_events``)."""
    return _bulk(store, INSERT_RUN, runs, batch)


def insert_events(store: Store, rows: Iterable[EventRecord], *, batch: int = BULK_BATCH) -> int:
    """Write events of runs already in the ledger in bulk, ``batch`` rows per transaction (the
    search index's triggers index them as they go); returns how many."""
    return _bulk(store, INSERT_EVENT, rows, batch)


def _bulk(store: Store, sql: str, rows: Iterable[tuple[Any, ...]], batch: int) -> int:
    total = 0
    for chunk in _chunks(iter(rows), batch):
        with store.transaction() as conn:
            conn.executemany(sql, chunk)
        total += len(chunk)
    return total


def _chunks(rows: Iterator[tuple[Any, ...]], size: int) -> Iterator[list[tuple[Any, ...]]]:
    while chunk := list(islice(rows, size)):
        yield chunk
