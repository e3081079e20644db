"""A run's cancel watch: ``runner runs cancel RUN`` (or the web's button) writes a request to the
store; the process running the run sees it here, cuts the run's current step (``runner.host.procs.Cut``:
a command's process tree gets SIGTERM, then SIGKILL after ``serve.kill_grace``; a model request or
MCP call is given up) and sets the run's stop event, the one a first SIGTERM sets, so the run ends
``interrupted`` (reason ``cancelled``) at once. A run parked on an approval stops waiting too (the
parked wait watches the same event). A run whose row someone else ended (declared lost: a retry
may run) is cut and stopped the same way: its fence.

A ``CancelWatcher`` is a thread with its own connection that looks at ``PRAGMA data_version``
every ``CHECK`` seconds (no query, no lock) and reads the control table only when another
connection committed or a new run is being watched, so a run costs next to nothing while nobody
writes, and a cancel is seen within ~0.1 s whether the run is waiting for the model, running a
tool or parked. One watcher follows one run at a time: a run on its own (``run-job``, a forked
worker) gets a watcher of its own, started with the run and ended with it; serve's reusable
worker keeps one watcher for all the runs it takes one after another, so a run does not pay for
a thread and a connection (about a fifth of a script-only run's CPU).

The same look finds the messages sent to the run (steering: ``runner runs say``, the dashboard, a
kanban comment) and puts them in the run's ``Inbox`` (``runner.run.steer``), which the agent loop
empties before its next model request. The watch only reads: the run marks the messages handled
in the transaction that records its end.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

from runner.host.procs import Cut
from runner.run.steer import Inbox
from runner.statuses import FINAL, RunStatus
from runner.store import ledger
from runner.store.control import run_requests
from runner.store.dialect import PgURL

CHECK = 0.1


class CancelWatch:
    """One run's watch: ``start`` when the run starts, ``close`` when it ends; ``by`` names who
    asked, once a request was seen (then ``stop`` is set). Messages sent to the run go to
    ``inbox`` (none is read without one)."""

    def __init__(
        self,
        watcher: CancelWatcher,
        run_id: str,
        stop: threading.Event,
        *,
        owned: bool = False,
        cut: Cut | None = None,
        inbox: Inbox | None = None,
    ):
        self.watcher, self.run_id, self.stop, self.owned, self.cut = watcher, run_id, stop, owned, cut
        self.inbox = inbox
        self.by: str | None = None
        self.fenced: RunStatus | None = None  # the run was ended by someone else meanwhile (declared lost)

    @classmethod
    def alone(
        cls,
        path: Path,
        run_id: str,
        stop: threading.Event,
        *,
        check: float = CHECK,
        cut: Cut | None = None,
        inbox: Inbox | None = None,
    ) -> CancelWatch:
        """A watch with a watcher of its own, which ``close`` ends."""
        return cls(CancelWatcher(path, check=check), run_id, stop, owned=True, cut=cut, inbox=inbox)

    def start(self) -> CancelWatch:
        self.watcher.follow(self)
        return self

    def close(self) -> None:
        self.watcher.unfollow(self)
        if self.owned:
            self.watcher.close()

    def look(self, conn: Any) -> bool:
        """Is there a cancel request for this run, or did someone else end its row (declared it
        lost: the retry policy took over)? Then ``by`` or ``fenced`` is set, the current step is cut
        and ``stop`` is set. New messages sent to the run go to its inbox."""
        status = ledger.status_on(conn, self.run_id)
        if status in FINAL:
            self.fenced = status
            self._end()
            return True
        seen = self.inbox.seen() if self.inbox is not None else frozenset()
        by, steers = run_requests(conn, self.run_id, seen=seen)
        if self.inbox is not None and steers:
            self.inbox.put(steers)
        if by is None:
            return False
        self.by = by
        self._end()
        return True

    def _end(self) -> None:
        if self.cut is not None:
            self.cut.event.set()  # first: the run's main thread learns it was cut, not signalled
        self.stop.set()


class CancelWatcher:
    """The thread and connection that watch the store at ``path`` for the run being followed (at
    most one at a time). The thread starts with the first ``follow`` (and again with the next
    one, should a store error have ended it); ``close`` ends it."""

    def __init__(self, path: Path, *, check: float = CHECK):
        self.path, self.check = path, check
        self._lock = threading.Lock()
        self._current: CancelWatch | None = None
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def follow(self, watch: CancelWatch) -> None:
        """Watch ``watch``'s run from now on. Its first look is the watcher's next one (within
        ``check``, at once for a new watcher): a run that is over before then costs no query, and
        waking the thread for it would cost more than the look."""
        with self._lock:
            self._current = watch
            if self._thread is None or not self._thread.is_alive():  # a thread the store failed under ended
                self._thread = threading.Thread(target=self._run, name="runner-cancel", daemon=True)
                self._thread.start()

    def unfollow(self, watch: CancelWatch) -> None:
        with self._lock:
            if self._current is watch:
                self._current = None

    def close(self) -> None:
        self._closed.set()
        thread = self._thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(timeout=5)

    def _run(self) -> None:
        try:
            conn = _connect(self.path)
        except sqlite3.Error:
            return  # the store is unreachable: the run's own writes report that, not this thread
        try:
            self._watch(conn)
        except sqlite3.Error:
            return  # the store went away under the run: its own writes report that, not this thread
        finally:
            conn.close()

    def _watch(self, conn: Any) -> None:
        seen, looked_at = -1, None
        while not self._closed.is_set():
            with self._lock:
                current = self._current
            if current is not None:
                version = conn.execute("PRAGMA data_version").fetchone()[0]
                if version != seen or current is not looked_at:
                    seen, looked_at = version, current
                    if current.look(conn):
                        self.unfollow(current)
            self._closed.wait(self.check)


def _connect(path: Path) -> Any:
    """The watch's own connection: a SQLite file, or a PostgreSQL store (``PgURL``; its adapter
    answers ``PRAGMA data_version`` with the server's WAL position, and raises sqlite3's errors)."""

    if isinstance(path, PgURL):
        from runner.store.pg import PgConnection

        return PgConnection(str(path))
    return sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
