"""Failure alerts: what a run's end, a pause or a failed delivery sends to ``on_failure:`` (the
job's) or ``alerts:`` (config.yaml's) sinks, throttled per job, redacted, recorded as an
``alert`` event on the run.

Sent by the process that finalises the run: the run worker (its own failures, a failed delivery,
a recovery), serve's pool (timeouts, shutdown, a dead worker, a pause) and the store's recovery
of rows left ``running`` (``unknown``).

Idempotent across attempts (issue 33): an alert's key (the ``Idempotency-Key`` header) is
``RUN:alert:KIND``, RUN the first attempt of the journal the run writes to, KIND the event (a
failure's with the end it reports); each sink that took it is recorded in ``step_keys``
(``KEY:N``), so an attempt that resumed the run does not send the same alert to it again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from runner import events
from runner.clock import utcnow
from runner.config.sinks import Sink, parse_sink
from runner.delivery import throttle
from runner.delivery.message import Message, capped
from runner.delivery.send import Delivered, SendContext, send
from runner.safety.redact import Redactor
from runner.statuses import RunStatus
from runner.store import Store, ledger
from runner.store import journal as steps
from runner.store.files import FileKind, read
from runner.store.runs import Recorder

if TYPE_CHECKING:
    from runner.config.jobs import Job
    from runner.config.machine import Config
    from runner.store.control import ApprovalRequest

FAILING = frozenset({RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.UNKNOWN})
ALERTED_INTERRUPTIONS = frozenset({"shutdown"})  # a person's Ctrl-C or an overlap replace is no alert
ALERTED_SKIPS = frozenset({"budget"})  # a run a fleet budget cap kept from starting (wake_false, overlap: no alert)
TAIL_LINES = 20
TAIL_CHARS = 1500


class Event:
    FAILED = "failed"
    RECOVERED = "recovered"
    PAUSED = "paused"
    DELIVERY_FAILED = "delivery_failed"
    SKIPPED = "skipped"  # a budget cap kept the run from starting
    APPROVAL = "approval_needed"  # a run parked on a dangerous command waits for a person
    STORE_UNAVAILABLE = "store_unavailable"  # serve's store cannot answer (locked, disk full, down)
    RELOAD_REFUSED = "reload_refused"  # serve kept its jobs: jobs.yaml was empty, had no jobs or was invalid


@dataclass(frozen=True)
class RunEnd:
    """A run's final state as an alert reports it."""

    job: str
    run_id: str
    status: RunStatus
    reason: str | None = None
    error: str | None = None
    tail: str = ""  # the last lines of the output or partial answer


def is_alerted(status: RunStatus, reason: str | None) -> bool:
    return (
        status in FAILING
        or (status == RunStatus.INTERRUPTED and reason in ALERTED_INTERRUPTIONS)
        or (status == RunStatus.SKIPPED and reason in ALERTED_SKIPS)
    )


def tail(text: str) -> str:
    lines = text.rstrip().splitlines()[-TAIL_LINES:]
    joined = "\n".join(lines)
    return joined[-TAIL_CHARS:]


def tail_of_run(store: Store, run_id: str) -> str:
    """The output file's last lines, else the last thing the model said, for a run another process ended."""

    row = ledger.get(store, run_id)
    if row and row.output_path:
        try:
            return tail(read(store, run_id, FileKind.OUTPUT, row.output_path))
        except OSError:
            pass  # the file is gone: fall back to the events
    ev = store.one(
        "SELECT payload FROM run_events WHERE run_id=? AND kind IN (?, ?, ?) ORDER BY seq DESC LIMIT 1",
        (run_id, events.Event.RESPONSE, events.Event.TOOL_RESULT, events.Event.PRE_RUN),
    )
    if ev is None:
        return ""
    payload = json.loads(ev["payload"])
    return tail(str(payload.get("content") or payload.get("result") or payload.get("stdout") or ""))


class Alerter:
    """Sends alerts for one process; ``job`` may be None when jobs.yaml no longer names it."""

    def __init__(
        self,
        store: Store,
        config: Config,
        *,
        home: Path,
        base_dir: Path,
        redactor: Redactor | None = None,
        stdout: TextIO | None = None,
        emit: Recorder | None = None,
    ):
        self.store, self.config = store, config
        self.redactor = redactor or Redactor()
        self.emit = emit  # the recorder of the run this process is running (one seq counter per run)
        self.ctx = SendContext(config, base_dir=base_dir, home=home, redactor=self.redactor, stdout=stdout)

    def sinks(self, job: Job | None) -> list[Sink]:
        items = job.spec.on_failure if job is not None and job.spec.on_failure is not None else self.config.alerts
        return [parse_sink(item) for item in items]

    def waiting_sinks(self, job: Job | None) -> list[Sink]:
        """Who hears of a run waiting on an approval: config.yaml's ``alerts_waiting:``; unset, the
        sinks of the job's failure alerts; ``false`` or ``[]``: nobody."""
        chosen = self.config.alerts_waiting
        if chosen is None:
            return self.sinks(job)
        return [parse_sink(item) for item in chosen or []]

    # -- the events ------------------------------------------------------------------------------
    def run_ended(self, job: Job | None, end: RunEnd) -> list[Delivered]:
        """A run reached its final status: a failure alert (throttled), or a recovery after failures."""
        sinks = self.sinks(job)
        if not sinks:
            return []
        if is_alerted(end.status, end.reason):
            event = Event.SKIPPED if end.status == RunStatus.SKIPPED else Event.FAILED
            return self._throttled(sinks, throttle.FAILURE, event, end)
        if end.status == RunStatus.SUCCEEDED:
            streak = throttle.reset(self.store, end.job, throttle.FAILURE)
            if streak:
                note = f"succeeded after {streak} failed run{'s' if streak > 1 else ''}"
                return self._send(sinks, Event.RECOVERED, end, note=note)
        return []

    def paused(self, job: Job | None, end: RunEnd, why: str) -> list[Delivered]:
        sinks = self.sinks(job)
        note = f"{why}; resume with: runner jobs resume {end.job}"
        return self._send(sinks, Event.PAUSED, end, note=note) if sinks else []

    def delivery(self, job: Job | None, end: RunEnd, delivered: list[Delivered]) -> list[Delivered]:
        """After the output's delivery: an alert naming the sinks that failed after their retries."""
        sinks = self.sinks(job)
        failed = [d for d in delivered if not d.ok]
        if not sinks:
            return []
        if not failed:
            throttle.reset(self.store, end.job, throttle.DELIVERY)
            return []
        note = "delivery failed: " + "; ".join(f"{d.sink}: {d.detail}" for d in failed)
        return self._throttled(sinks, throttle.DELIVERY, Event.DELIVERY_FAILED, end, note=note)

    def approval_needed(self, job: Job | None, request: ApprovalRequest) -> list[Delivered]:
        """A run parked on a dangerous command, now ``waiting`` (never throttled: each request waits
        for an answer, and is told once), to the ``alerts_waiting`` sinks: the command (redacted
        when stored), how to answer, and the run's page when ``web.url`` is set."""
        sinks = self.waiting_sinks(job)
        if not sinks:
            return []
        end = RunEnd(request.job, request.run_id, RunStatus.WAITING, "approval")
        page = f"{self.config.web.url.rstrip('/')}/runs/{request.run_id}" if self.config.web.url else None
        note = (
            f"waiting for approval {request.id} until {request.expires_at}: {request.command}\n"
            f"reasons: {'; '.join(request.reasons)}\n"
            f"grant: runner approvals grant {request.id}\n"
            f"deny:  runner approvals deny {request.id} --reason '...'"
            + (f"\nor answer on the dashboard: {page}" if page else "")
        )
        base = self.message(Event.APPROVAL, end, note)
        extra = {
            "approval_id": request.id,
            "command": request.command,
            "grant": f"runner approvals grant {request.id}",
            "deny": f"runner approvals deny {request.id}",
            "url": page,
        }
        key = f"{self.key(request.run_id, Event.APPROVAL)}:{request.id}"
        message = replace(base, key=key, payload={**base.payload, **extra})
        return self._keyed(sinks, Event.APPROVAL, message)

    # -- sending ------------------------------------------------------------------------------------
    def _throttled(self, sinks: list[Sink], topic: str, event: str, end: RunEnd, note: str = "") -> list[Delivered]:
        if self._all_done(sinks, self.key(end.run_id, _kind(event, end))):  # an earlier attempt sent it
            self._recorder(end.run_id)(events.Event.ALERT, events.Alert(event, False, repeat=True))
            return []
        limits = self.config.alerts_throttle
        decision = throttle.record(
            self.store, end.job, topic, end.run_id, every=limits.every, min_interval=limits.min_interval, now=utcnow()
        )
        if decision.repeat:  # this run's end was alerted already (by the run itself, or by serve)
            self._recorder(end.run_id)(events.Event.ALERT, events.Alert(event, False, repeat=True))
            return []
        if not decision.send:
            alert = events.Alert(event, False, streak=decision.streak, throttled=True)
            self._recorder(end.run_id)(events.Event.ALERT, alert)
            return []
        extra = f"{decision.streak} in a row" if decision.streak > 1 else ""
        if decision.suppressed:
            extra += f"; {decision.suppressed} similar alert(s) held back since the last one"
        return self._send(sinks, event, end, note="; ".join(x for x in (note, extra.strip("; ")) if x))

    def _send(self, sinks: list[Sink], event: str, end: RunEnd, note: str = "") -> list[Delivered]:
        message = self.message(event, end, note)
        return self._keyed(sinks, event, replace(message, key=self.key(end.run_id, _kind(event, end))))

    def key(self, run_id: str, kind: str) -> str:
        """The idempotency key of an alert about run ``run_id``: ``RUN:alert:KIND``, RUN the first
        attempt of the journal it writes to (the same in every attempt that resumes it)."""
        return f"{steps.key_of(self.store, run_id)}:alert:{kind}"

    def _all_done(self, sinks: list[Sink], key: str) -> bool:
        return all(steps.done(self.store, f"{key}:{i}") for i in range(1, len(sinks) + 1))

    def _keyed(self, sinks: list[Sink], event: str, message: Message) -> list[Delivered]:
        """Send ``message`` to each sink an earlier attempt of the run did not send it to (its key,
        the ``Idempotency-Key`` header, plus ``:N`` for the Nth sink is in ``step_keys`` once sent)."""
        results: list[Delivered] = []
        for i, sink in enumerate(sinks, 1):
            key = f"{message.key}:{i}"
            if steps.done(self.store, key):
                results.append(Delivered(sink.label, True, f"sent already by an earlier attempt (key {message.key})"))
                continue
            result = send(sink, message, self.ctx)
            if result.ok:
                root = steps.key_of(self.store, message.run_id)
                steps.mark_done(self.store, key, root=root, run_id=message.run_id, what=f"alert {event} {sink.label}")
            results.append(result)
        self._recorder(message.run_id)(events.Event.ALERT, events.Alert(event, True, [r.as_dict() for r in results]))
        return results

    def _recorder(self, run_id: str) -> Recorder:
        if self.emit is not None and self.emit.run_id == run_id:
            return self.emit
        return Recorder(self.store, run_id, self.redactor)

    def message(self, event: str, end: RunEnd, note: str = "") -> Message:
        r = self.redactor
        hint = f"runner runs show {end.run_id}"
        payload = {
            "type": "alert",
            "event": event,
            "job": end.job,
            "run_id": end.run_id,
            "status": str(end.status),
            "reason": end.reason,
            "error": r(end.error) if end.error else None,
            "note": r(note) or None,
            "tail": r(end.tail),
            "hint": hint,
        }
        title = {
            Event.FAILED: f"run {end.status}",
            Event.SKIPPED: f"run skipped ({end.reason})",
            Event.RECOVERED: "recovered",
            Event.PAUSED: "paused",
            Event.DELIVERY_FAILED: "delivery failed",
            Event.APPROVAL: "approval needed",
        }[event]
        subject = f"[runner] {end.job}: {title}"
        lines = [f"run {end.run_id}: {end.status}" + (f" ({end.reason})" if end.reason else "")]
        if payload["error"]:
            lines.append(f"error: {payload['error']}")
        if payload["note"]:
            lines.append(str(payload["note"]))
        if payload["tail"]:
            lines += ["--- last lines ---", capped(str(payload["tail"]), TAIL_CHARS), "---"]
        lines.append(f"see: {hint}")
        return Message(end.run_id, f"{end.run_id}:{event}", subject, "\n".join(lines), payload)


def _kind(event: str, end: RunEnd) -> str:
    """The step of an alert in its key: the event, and for a failure the end it reports (a resumed
    attempt that ends otherwise is alerted again; one that ends the same way is not)."""
    if event != Event.FAILED:
        return event
    return f"{event}:{end.status}" + (f"/{end.reason}" if end.reason else "")


@dataclass(frozen=True)
class Notice:
    """Something about serve itself, not about one run (its store cannot answer, a reload it
    refused): sent to config.yaml's ``alerts:`` sinks, unthrottled (the caller sends each once) and
    recorded on no run; it needs no store, so it goes out while the store cannot answer."""

    event: str  # Event.STORE_UNAVAILABLE | Event.RELOAD_REFUSED
    error: str
    key: str  # the idempotency key: the same notice sent twice is one to the receiver
    note: str = ""
    hint: str = ""


NOTICE_TITLES = {Event.STORE_UNAVAILABLE: "store unavailable", Event.RELOAD_REFUSED: "jobs.yaml reload refused"}


def notice_message(notice: Notice, redactor: Redactor) -> Message:
    r = redactor
    payload = {
        "type": "alert",
        "event": notice.event,
        "job": None,
        "run_id": None,
        "status": None,
        "reason": None,
        "error": r(notice.error),
        "note": r(notice.note) or None,
        "tail": "",
        "hint": notice.hint or None,
    }
    lines = [str(payload["error"])]
    if payload["note"]:
        lines.append(str(payload["note"]))
    if notice.hint:
        lines.append(f"see: {notice.hint}")
    subject = f"[runner] serve: {NOTICE_TITLES.get(notice.event, notice.event)}"
    return Message("", notice.key, subject, "\n".join(lines), payload)


def send_notice(config: Config, notice: Notice, *, home: Path, base_dir: Path) -> list[Delivered]:
    """``notice`` to every sink of config.yaml's ``alerts:`` (none: nothing is sent)."""
    redactor = Redactor()
    ctx = SendContext(config, base_dir=base_dir, home=home, redactor=redactor)
    message = notice_message(notice, redactor)
    return [send(parse_sink(item), message, ctx) for item in config.alerts]


def alert_lost(
    store: Store, config: Config, run_ids: list[str], jobs: dict[str, Job], *, home: Path, base_dir: Path
) -> None:
    """Alerts for runs the store's recovery just marked ``unknown``."""
    alerter = Alerter(store, config, home=home, base_dir=base_dir)
    for run_id in run_ids:
        row = ledger.get(store, run_id)
        if row is None:
            continue
        job = jobs.get(row.job)
        end = RunEnd(row.job, run_id, row.status, row.reason, row.error, tail_of_run(store, run_id))
        alerter.run_ended(job, end)
