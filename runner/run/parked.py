"""Parked approvals: ``approvals: manual`` with nobody at a terminal (serve, kanban workers,
``run-job`` without a TTY). A dangerous command does not get an automatic no: the request
(redacted command, reasons, job, run) is stored, an alert goes out naming the command that
answers it, and the run waits, holding its backend, until a person runs ``runner approvals grant
ID`` / ``deny ID`` (or presses the web's button), or ``approval_timeout`` passes (denied, reason
``timeout``). Hardline commands never get here: the gate refuses them before asking.

The wait counts against the run's ``timeout`` (as Airflow counts time a task spends deferred
against its ``execution_timeout``): it ends at ``approval_timeout`` or at the run's own loop
deadline, whichever comes first, so a parked run never outlives its timeout and serve's worker
timeout needs no exception. A cancel (``runner runs cancel``) or a signal ends the wait at once
(the request becomes ``cancelled``); a run killed while parked leaves its request ``abandoned``
(``ledger.finish``, the store's recovery), never pending.

While parked the run's status is ``waiting`` (``ledger.wait``, in the transaction that stores the
request) and back to ``running`` once the request is answered, expires or is cancelled
(``ledger.resume``); ``runner runs list`` shows it, ``runner runs show`` and ``runner approvals
pending`` say what it waits for. The alert (``notify``) goes to config.yaml's ``alerts_waiting:``
sinks (default: the failure alerts' sinks), once per request.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from runner.clock import utcnow
from runner.config.schedules import format_duration
from runner.events import ApprovalAnswered, ApprovalParked, Emit, Event
from runner.safety.approval import Answer
from runner.statuses import ApprovalState
from runner.store import Store, ledger
from runner.store.control import ApprovalRequest, close_request, get_request, park

if TYPE_CHECKING:
    from runner.safety.shell import Verdict

POLL = 0.1  # seconds between looks at PRAGMA data_version while parked


@dataclass(frozen=True)
class Parking:
    """The callback a gate gets for ``manual`` with nobody at a terminal (``name`` is ``parked``)."""

    store: Store
    run_id: str
    job: str
    timeout: float  # the job's approval_timeout, seconds
    deadline: Callable[[], float | None]  # time.monotonic() by which the run's loop must stop
    stop: threading.Event  # set by a cancel request or a signal
    redact: Callable[[str], str]
    emit: Emit
    notify: Callable[[ApprovalRequest], None]  # the alert naming `runner approvals grant ID` (alerts_waiting)
    cancelled_by: Callable[[], str | None] = field(default=lambda: None)
    name: str = "parked"

    def __call__(self, command: str, verdict: Verdict) -> Answer:
        start = time.monotonic()
        wait = self.timeout
        deadline = self.deadline()
        if deadline is not None:
            wait = max(0.0, min(wait, deadline - start))
        now = utcnow()
        with self.store.transaction():  # the request and the run's `waiting` in one write
            request = park(
                self.store,
                run_id=self.run_id,
                job=self.job,
                command=self.redact(command),
                reasons=tuple(verdict.reasons),
                now=now,
                expires=now + timedelta(seconds=wait),
            )
            waiting = ledger.wait(self.store, self.run_id)
        if not waiting:  # someone else ended the run (declared it lost): nobody may answer now
            why = "the run had ended before it could wait"
            return self._answer(close_request(self.store, request.id, ApprovalState.ABANDONED, by="nobody", reason=why))
        try:
            parked = ApprovalParked(request.id, request.command, list(request.reasons), request.expires_at)
            self.emit(Event.APPROVAL_PARKED, parked)
            self.notify(request)
            final = self._wait(request, start + wait, capped=wait < self.timeout)
        finally:
            ledger.resume(self.store, self.run_id)  # answered, expired or cancelled: running again
        return self._answer(final)

    def _wait(self, request: ApprovalRequest, until: float, *, capped: bool) -> ApprovalRequest:
        """Until the request is answered, expires or the run is stopped; returns it as it ends."""
        conn = self.store.conn
        seen = -1
        while True:
            version = conn.execute("PRAGMA data_version").fetchone()[0]
            if version != seen:
                seen = version
                current = get_request(self.store, request.id)
                if current.status != ApprovalState.PENDING:
                    return current
            if self.stop.is_set():
                by = self.cancelled_by() or "signal"
                why = f"the run was cancelled by {by}" if by != "signal" else "the run was stopped"
                return close_request(self.store, request.id, ApprovalState.CANCELLED, by=by, reason=why)
            left = until - time.monotonic()
            if left <= 0:
                limit = (
                    "the run's timeout came first" if capped else f"approval_timeout {format_duration(self.timeout)}"
                )
                why = f"no answer within {limit}"
                return close_request(self.store, request.id, ApprovalState.EXPIRED, by="timeout", reason=why)
            self.stop.wait(min(POLL, left))

    def _answer(self, request: ApprovalRequest) -> Answer:
        answered = ApprovalAnswered(request.id, request.status, request.decided_by, request.reason)
        self.emit(Event.APPROVAL_ANSWERED, answered)
        by = request.decided_by or "nobody"
        if request.status == ApprovalState.GRANTED:
            return Answer(True, by)
        if request.status == ApprovalState.DENIED:
            why = f"denied by {by}" + (f": {request.reason}" if request.reason else "")
            return Answer(False, by, why)
        # expired (by "timeout"), cancelled (the audit names the state; the request names who cancelled)
        who = "timeout" if request.status == ApprovalState.EXPIRED else str(request.status)
        return Answer(False, who, request.reason or str(request.status))
