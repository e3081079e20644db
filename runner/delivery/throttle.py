"""The per-job alert throttle, kept in the store (``alert_state``): the first alert of a streak
is sent, then every ``every``-th, or one once ``min_interval`` has passed since the last sent."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from runner.clock import iso
from runner.store import Store

FAILURE = "failure"
DELIVERY = "delivery"


@dataclass(frozen=True)
class Decision:
    send: bool
    streak: int  # events of this topic in a row, this one included
    suppressed: int  # alerts held back since the last one sent (reported in this one)
    #: this run's event was counted already (serve and the run itself both saw it end): nothing sent
    repeat: bool = False


def record(
    store: Store, job: str, topic: str, run_id: str, *, every: int, min_interval: float, now: datetime
) -> Decision:
    """Count one more event of ``topic`` for ``job`` and decide whether its alert goes out. The
    same run counted twice (a run that stopped itself at its timeout, and serve, which stopped it
    too) is counted and alerted once."""
    with store.transaction() as conn:
        row = conn.execute(
            "SELECT streak, suppressed, last_sent_at, last_run FROM alert_state WHERE job=? AND topic=?", (job, topic)
        ).fetchone()
        if row and row["streak"] and row["last_run"] == run_id:
            return Decision(False, row["streak"], row["suppressed"], repeat=True)
        streak = (row["streak"] if row else 0) + 1
        suppressed = row["suppressed"] if row else 0
        last = datetime.fromisoformat(row["last_sent_at"]) if row and row["last_sent_at"] else None
        due = last is None or (now - last).total_seconds() >= min_interval
        send = streak == 1 or streak % every == 0 or due
        conn.execute(
            "INSERT INTO alert_state (job, topic, streak, suppressed, last_sent_at, last_run) VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT(job, topic) DO UPDATE SET streak=excluded.streak, suppressed=excluded.suppressed, "
            "last_sent_at=excluded.last_sent_at, last_run=excluded.last_run",
            (job, topic, streak, 0 if send else suppressed + 1, iso(now) if send else iso(last), run_id),
        )
    return Decision(send, streak, suppressed if send else suppressed + 1)


def reset(store: Store, job: str, topic: str) -> int:
    """End a streak; return how long it was (0: there was none)."""
    with store.transaction() as conn:
        row = conn.execute("SELECT streak FROM alert_state WHERE job=? AND topic=?", (job, topic)).fetchone()
        if not row or not row["streak"]:
            return 0
        conn.execute("UPDATE alert_state SET streak=0, suppressed=0 WHERE job=? AND topic=?", (job, topic))
        return int(row["streak"])
