"""Scheduler state in the store: ``job_state`` (slots, pause, failure streak) and
``serve_instance`` (serve's heartbeat). Used by serve and by `runner jobs ...`."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runner.clock import iso, parse_iso, utcnow
from runner.host.procs import HOST, pid_alive, start_time
from runner.serve.planner import JobState
from runner.store import Store


def _state(row: dict[str, Any]) -> JobState:
    return JobState(
        job=row["job"],
        schedule=row["schedule"],
        first_seen=parse_iso(row["first_seen"]),
        last_slot=parse_iso(row["last_slot"]),
        resolved_at=parse_iso(row["resolved_at"]),
        paused=bool(row["paused"]),
        paused_reason=row["paused_reason"],
        failure_streak=int(row["failure_streak"] or 0),
    )


def load_states(store: Store) -> dict[str, JobState]:
    return {row["job"]: _state(row) for row in store.query("SELECT * FROM job_state")}


def save_sight(store: Store, state: JobState, *, now: datetime | None = None) -> None:
    """Store a first sight (schedule, first_seen, resolved time); pause and streak are kept."""
    with store.transaction() as conn:
        conn.execute(
            "INSERT INTO job_state (job, schedule, first_seen, last_slot, resolved_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(job) DO UPDATE SET schedule=excluded.schedule, "
            "first_seen=excluded.first_seen, last_slot=excluded.last_slot, resolved_at=excluded.resolved_at, "
            "updated_at=excluded.updated_at",
            (
                state.job,
                state.schedule,
                iso(state.first_seen),
                iso(state.last_slot),
                iso(state.resolved_at),
                iso(now or utcnow()),
            ),
        )


def set_last_slot(store: Store, job: str, slot: datetime | None) -> None:
    with store.transaction() as conn:
        conn.execute("UPDATE job_state SET last_slot=?, updated_at=? WHERE job=?", (iso(slot), iso(utcnow()), job))


def set_paused(store: Store, job: str, paused: bool, reason: str | None = None, *, now: datetime | None = None) -> None:
    """Pause or resume ``job``; resuming also clears the failure streak."""
    stamp = iso(now or utcnow())
    with store.transaction() as conn:
        conn.execute("INSERT OR IGNORE INTO job_state (job, updated_at) VALUES (?, ?)", (job, stamp))
        if paused:
            conn.execute(
                "UPDATE job_state SET paused=1, paused_reason=?, paused_at=?, updated_at=? WHERE job=?",
                (reason, stamp, stamp, job),
            )
        else:
            conn.execute(
                "UPDATE job_state SET paused=0, paused_reason=NULL, paused_at=NULL, failure_streak=0, "
                "updated_at=? WHERE job=?",
                (stamp, job),
            )


def paused_jobs(store: Store) -> dict[str, str | None]:
    return {
        r["job"]: r["paused_reason"] for r in store.query("SELECT job, paused_reason FROM job_state WHERE paused=1")
    }


def record_slot_result(store: Store, job: str, failed: bool) -> int:
    """Update the job's streak of consecutive failed slots; return it. A success while the streak
    is already 0 writes nothing (the common case: no write lock per finished run in a burst)."""
    if not failed:
        row = store.one("SELECT failure_streak FROM job_state WHERE job=?", (job,))
        if row is not None and row["failure_streak"] == 0:
            return 0
    with store.transaction() as conn:
        conn.execute("INSERT OR IGNORE INTO job_state (job, updated_at) VALUES (?, ?)", (job, iso(utcnow())))
        if failed:
            conn.execute("UPDATE job_state SET failure_streak=failure_streak+1 WHERE job=?", (job,))
        else:
            conn.execute("UPDATE job_state SET failure_streak=0 WHERE job=?", (job,))
        row = conn.execute("SELECT failure_streak FROM job_state WHERE job=?", (job,)).fetchone()
    return int(row[0])


# -- serve's heartbeat -----------------------------------------------------------------------
@dataclass(frozen=True)
class ServeStatus:
    alive: bool
    pid: int | None = None
    host: str | None = None
    started_at: str | None = None
    heartbeat_at: str | None = None
    running: int = 0
    waiting: int = 0

    def describe(self, now: datetime | None = None) -> str:
        if self.pid is None:
            return "serve: never started on this RUNNER_HOME"
        beat = parse_iso(self.heartbeat_at)
        ago = f"{((now or utcnow()) - beat).total_seconds():.0f}s ago" if beat else "never"
        if self.alive:
            return f"serve: running (pid {self.pid}, heartbeat {ago}, {self.running} running, {self.waiting} queued for a slot)"
        return f"serve: not running (last: pid {self.pid} on {self.host}, heartbeat {ago})"


def register_serve(store: Store, *, jobs_path: str, heartbeat_s: float, now: datetime) -> None:
    pid = os.getpid()
    with store.transaction() as conn:
        conn.execute(
            "INSERT OR REPLACE INTO serve_instance (id, pid, pid_start, host, started_at, heartbeat_at, "
            "stopped_at, jobs_path, heartbeat_s, running, waiting) VALUES (1, ?, ?, ?, ?, ?, NULL, ?, ?, 0, 0)",
            (pid, start_time(pid), HOST, iso(now), iso(now), jobs_path, heartbeat_s),
        )


def heartbeat(store: Store, *, now: datetime, running: int, waiting: int, stopped: bool = False) -> None:
    with store.transaction() as conn:
        conn.execute(
            "UPDATE serve_instance SET heartbeat_at=?, running=?, waiting=?, stopped_at=? WHERE id=1 AND pid=?",
            (iso(now), running, waiting, iso(now) if stopped else None, os.getpid()),
        )


def serve_status(store: Store, now: datetime | None = None) -> ServeStatus:
    row = store.one("SELECT * FROM serve_instance WHERE id=1")
    if row is None:
        return ServeStatus(alive=False)
    now = now or utcnow()
    beat = parse_iso(row["heartbeat_at"])
    fresh = beat is not None and (now - beat).total_seconds() <= max(3 * (row["heartbeat_s"] or 5.0), 15.0)
    alive = fresh and row["stopped_at"] is None
    if alive and row["host"] == HOST:
        alive = pid_alive(int(row["pid"]), row["pid_start"])
    return ServeStatus(
        alive=alive,
        pid=row["pid"],
        host=row["host"],
        started_at=row["started_at"],
        heartbeat_at=row["heartbeat_at"],
        running=int(row["running"] or 0),
        waiting=int(row["waiting"] or 0),
    )
