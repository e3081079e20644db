"""A run's cancel watch: ``runner runs cancel RUN`` (or the web's button) writes a request to the
store; the process running the run sees it here and sets the run's stop event, the one a first
SIGTERM sets, so the run finishes its current step and ends ``interrupted`` (reason
``cancelled``). A run parked on an approval stops waiting too (the parked wait watches the same
event).

A thread with its own connection looks at ``PRAGMA data_version`` every ``CHECK`` seconds (no
query, no lock) and reads the control table only when another connection committed, so a run
costs next to nothing while nobody writes, and a cancel is seen within ~0.1 s whether the run is
waiting for the model, running a tool or parked.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

from runner.statuses import ControlKind

CHECK = 0.1


class CancelWatch:
    def __init__(self, path: Path, run_id: str, stop: threading.Event, *, check: float = CHECK):
        self.path, self.run_id, self.stop, self.check = path, run_id, stop, check
        self.by: str | None = None  # who asked, once a request was seen
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"runner-cancel-{run_id}", daemon=True)

    def start(self) -> CancelWatch:
        self._thread.start()
        return self

    def close(self) -> None:
        self._closed.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        try:
            conn = _connect(self.path)
        except sqlite3.Error:
            return  # the store is unreachable: the run's own writes report that, not this thread
        try:
            seen = -1
            while not self._closed.is_set():
                version = conn.execute("PRAGMA data_version").fetchone()[0]
                if version != seen:
                    seen = version
                    if self._look(conn):
                        return
                self._closed.wait(self.check)
        except sqlite3.Error:
            return  # the store went away under the run: its own writes report that, not this thread
        finally:
            conn.close()

    def _look(self, conn: Any) -> bool:
        row = conn.execute(
            "SELECT requested_by FROM control_requests WHERE run_id=? AND kind=? ORDER BY requested_at LIMIT 1",
            (self.run_id, ControlKind.CANCEL),
        ).fetchone()
        if row is None:
            return False
        self.by = str(row[0])
        self.stop.set()
        return True


def _connect(path: Path) -> Any:
    """The watch's own connection: a SQLite file, or a PostgreSQL store (``PgURL``; its adapter
    answers ``PRAGMA data_version`` with the server's WAL position, and raises sqlite3's errors)."""
    from runner.store.dialect import PgURL

    if isinstance(path, PgURL):
        from runner.store.pg import PgConnection

        return PgConnection(str(path))
    return sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
