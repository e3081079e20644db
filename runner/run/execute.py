"""One run of one job, start to finish.

prepare -> ledger row -> backend -> pre_run -> produce output (the agent loop, or the pre_run's
stdout) -> output file -> delivery -> final status. Bad input (unknown provider, broken template,
unreadable cassette) is found by ``prepare`` before the row is written, so a mistake costs
nothing and leaves nothing behind; once the row exists it gets its final status in ``finally``.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner import backends
from runner.agent.loop import SideAccount, grace_reserve
from runner.agent.tracing import Tracer, tracer_from_env
from runner.agent.types import Usage
from runner.backends.base import Backend, BackendContext
from runner.clock import utcnow
from runner.delivery.alerts import Alerter, RunEnd, tail, tail_of_run
from runner.delivery.send import SendContext
from runner.errors import RunnerError, StoreError, Tampered, failure_reason
from runner.events import (
    By,
    Delivered,
    Event,
    Failure,
    Fenced,
    PreRun,
    Resumed,
    RunFinished,
    RunStarted,
    Sandbox,
    SideCall,
    Steer,
)
from runner.events import Tampered as TamperedEvent
from runner.host.procs import Cut
from runner.run.agent_output import AgentOutput
from runner.run.cancel import CancelWatch
from runner.run.delivery import Output, deliver
from runner.run.journal import Journal, Opened, open_journal
from runner.run.parked import Parking
from runner.run.prepare import Prepared, prepare
from runner.run.prerun import PreRunResult, Verdict, check_pre, run_pre, verdict
from runner.run.produce import Produced, pre_run_failed, pre_run_timed_out
from runner.run.prompt import capped_context, render
from runner.run.prompt import variables as template_variables
from runner.run.protect import hold_reloads, masks_inside, protected_set, sandbox_plan, tampered
from runner.run.request import Replay, RunOutcome, RunRequest
from runner.run.steer import Inbox
from runner.run.untrusted import event_variables
from runner.safety.approval import build_gate
from runner.safety.control import ControlPlane, Fingerprint
from runner.safety.judge import Judge, summary_of
from runner.safety.latitude import Approvals
from runner.safety.redact import Redactor
from runner.settings import Settings
from runner.statuses import RunStatus
from runner.store import dumps, ledger
from runner.store.approvals import audit_recorder
from runner.store.atomic import write_run_file
from runner.store.control import settle_steers
from runner.store.files import FileKind, keep
from runner.store.journal import done as step_done
from runner.store.journal import mark_done
from runner.store.ledger import Reason
from runner.store.runs import Recorder, last_output
from runner.store.search import index_output

if TYPE_CHECKING:
    from runner.agent.auxiliary import AuxiliaryModel
    from runner.safety.approval import Callback, Gate
    from runner.safety.judge import JudgeReply, Ruling
    from runner.store.control import ApprovalRequest

__all__ = ["Run", "RunOutcome", "RunRequest", "execute"]


def execute(settings: Settings, req: RunRequest) -> RunOutcome:
    """Prepare (may raise, exit 2, nothing written), then run with a ledger row from start to final status."""
    prepared = prepare(settings, req)
    try:
        run = Run.start(settings, req, prepared)
    except Ended as ended:  # cancelled or declared lost before it started: nothing runs
        return RunOutcome(ended.row.id, ended.row.status, reason=ended.row.reason, error=ended.row.error)
    return run.go()


def _open_attempt(store: Any, req: RunRequest, now: datetime) -> str:
    """``runner runs resume``: the row of a new attempt of the run ``req.resumes`` is an attempt of."""
    assert req.resumes is not None
    before = ledger.get(store, req.resumes)
    if before is None:
        raise StoreError(f"run {req.resumes}: no ledger row to resume")
    return ledger.open_run(
        store,
        job=req.job.name,
        trigger=req.trigger,
        slot=before.slot,
        attempt=before.attempt + 1,
        parent_run=before.parent_run or before.id,
        task_id=req.task.task_id if req.task is not None else None,
        now=now,
    )


class Ended(Exception):
    """The queued row a run was given had ended before the run could start it."""

    def __init__(self, row: ledger.RunRow):
        super().__init__(f"run {row.id} ended ({row.status}) before it started")
        self.row = row


class Run:
    """One run with its ledger row: the steps in order, each a method; ``result`` is what ``finish`` records."""

    def __init__(self, settings: Settings, req: RunRequest, prepared: Prepared, run_id: str, now: datetime):
        self.settings, self.req, self.job, self.prepared = settings, req, req.job, prepared
        self.run_id, self.now = run_id, now
        self.redactor = Redactor()
        if prepared.secrets:
            self.redactor.add(*prepared.secrets)
        self.emit = Recorder(settings.store, run_id, self.redactor, listener=req.progress)
        self.started = time.monotonic()
        self.deadline = self.started + self.job.spec.timeout
        self.pre: PreRunResult | None = None
        self.result = RunOutcome(run_id, RunStatus.FAILED)
        self._backend: Backend | None = None
        self.control: ControlPlane | None = None
        self._before: Fingerprint | None = None
        # `runner runs cancel`, or the row ended by someone else: the current step is cut, req.stop set
        self.cut = Cut(grace=settings.config.serve.kill_grace)
        # `runner runs say`, the dashboard's box, a kanban comment: the watch fills it, the loop empties it
        self.inbox = Inbox()
        self.cancel = (
            CancelWatch(req.cancels, run_id, req.stop, cut=self.cut, inbox=self.inbox)
            if req.cancels is not None
            else CancelWatch.alone(settings.store.path, run_id, req.stop, cut=self.cut, inbox=self.inbox)
        )
        self.tracer: Tracer = tracer_from_env()
        self.side_calls = SideAccount()  # the smart-approval judge's replies, counted in the run's totals

    @classmethod
    def start(cls, settings: Settings, req: RunRequest, prepared: Prepared) -> Run:
        """Write the ledger row (or start the queued one the scheduler made) and the run's first
        event, ``run_started``. A queued row starts with its event in one transaction (one write
        lock: fifty workers of a burst start at once)."""
        now = utcnow()
        store = settings.store
        if req.resumes is not None:
            run_id = _open_attempt(store, req, now)
            run = cls(settings, req, prepared, run_id, now)
            run.emit_started()
            return run
        if req.run_id is None:
            task_id = req.task.task_id if req.task is not None else None
            run_id = ledger.open_run(store, job=req.job.name, trigger=req.trigger, slot=req.slot, task_id=task_id, now=now)
            run = cls(settings, req, prepared, run_id, now)
            run.emit_started()
            return run
        handoff = req.handoff
        with store.transaction():
            if handoff is None:
                started = ledger.start(store, req.run_id, now=now)
            else:
                started = ledger.start(store, req.run_id, now=now, dispatched_at=handoff.dispatched_at, waited_s=handoff.waited_s)
            if started:
                run = cls(settings, req, prepared, req.run_id, now)
                run.emit_started()
        if not started:
            row = ledger.get(store, req.run_id)
            if row is None:
                raise StoreError(f"run {req.run_id}: no ledger row to start")
            raise Ended(row)
        return run

    def emit_started(self) -> None:
        self.emit(Event.RUN_STARTED, RunStarted(self.job.name, self.req.trigger, pid=os.getpid()))

    @cached_property
    def opened(self) -> Opened:
        """The run's journal: the one of the attempt it resumes (``resume: auto`` after a lost
        worker, or ``runner runs resume``), else a fresh one."""
        store = self.settings.store
        row = ledger.get(store, self.run_id)
        if row is None:
            raise StoreError(f"run {self.run_id}: no ledger row")
        return open_journal(
            store, row, self.job.spec.resume, forced=self.req.resumes is not None, redact=self.redactor.redact_obj
        )

    @property
    def journal(self) -> Journal:
        return self.opened.journal

    def announce_resume(self) -> None:
        """A ``resumed`` event naming the attempt resumed and the step it resumes at."""
        before, journal = self.opened.before, self.opened.journal
        if before is None:
            return
        row = ledger.get(self.settings.store, self.run_id)
        self.emit(
            Event.RESUMED,
            Resumed(
                before.id,
                row.attempt if row is not None else before.attempt + 1,
                journal.last_turn,
                journal.results,
                journal.unfinished,
                journal=journal.root,
            ),
        )
        note = self.req.task.resume_note if self.req.task is not None else None
        if note:  # a kanban attempt: which attempt, why the last ended, comments it was not given
            self.inbox.put([Steer(f"resume:{self.run_id}", "the kanban board", note)])

    def go(self) -> RunOutcome:
        """The steps inside the run's span (``runner.agent.tracing``; a no-op unless OTel is configured)."""
        try:
            with self.tracer.span("run", {"runner.run_id": self.run_id, "runner.job": self.job.name}) as span:
                span.set("runner.trigger", str(self.req.trigger))
                outcome = self._go()
                span.set("runner.status", str(outcome.status))
                if outcome.reason:
                    span.set("runner.reason", outcome.reason)
            return outcome
        finally:
            self.tracer.close()

    def _go(self) -> RunOutcome:
        try:
            self.cancel.start()
            refused = self.reserve()
            if refused is not None:
                self.result = refused
                return self.result
            self.announce_resume()
            self.protect()
            self.open_backend()
            produced = self.pre_run() or self.prepared.producer.produce(self)
            self.check_tamper()
            self.result = self.conclude(produced)
        except KeyboardInterrupt:
            self.result = RunOutcome(
                self.run_id, RunStatus.INTERRUPTED, reason="interrupted", error="interrupted by the user"
            )
        except RunnerError as exc:
            self.result = self.failed(exc)
        finally:
            self.finish()
        return self.result

    def reserve(self) -> RunOutcome | None:
        """Reserve the run's maximum cost under config.yaml's ``budgets:`` before anything runs: a
        reservation that would pass a cap skips the run (reason ``budget``, alerted); one that
        cannot be written raises ``BudgetUnavailable`` (the run fails, nothing spent)."""
        plan = self.prepared.budget
        if plan is None:
            return None
        refusal = plan.reserve(self.settings.store, self.run_id)
        if refusal is None:
            self.emit(Event.BUDGET_RESERVED, plan.as_event())
            return None
        self.emit(Event.BUDGET_REFUSED, plan.as_event(refusal))
        return RunOutcome(self.run_id, RunStatus.SKIPPED, reason="budget", error=refusal.describe())

    @cached_property
    def loop_deadline(self) -> float:
        """When the agent loop and its tools stop: the rest of the timeout is the grace call's reserve."""

        return self.deadline - grace_reserve(self.job.spec.timeout)

    @property
    def backend(self) -> Backend:
        assert self._backend is not None, "the backend is opened before any step that uses it"
        return self._backend

    def protect(self) -> None:
        """Compute the run's control plane and fingerprint it before anything can change it."""

        cassette = self.req.model.path if isinstance(self.req.model, Replay) else None
        workdir = self.req.workdir or self.job.workdir
        self.control = protected_set(
            self.settings, self.job, workdir=workdir, cassette=cassette, inputs=self.req.control_inputs
        )
        if self.prepared.producer.steered:
            self._before = self.control.fingerprint()

    def check_tamper(self) -> None:
        """Fail the run (reason ``tampered``) when a protected file changed since ``protect``;
        hot reload is held until an operator reloads serve."""
        if self.control is None or self._before is None:
            return

        before, self._before = self._before, None  # checked once
        changed = tampered(self.control, before)
        if not changed:
            return
        hold_reloads(self.settings, self.run_id, changed)
        self.emit(Event.TAMPERED, TamperedEvent(list(changed)))
        raise Tampered(
            f"the run changed the runner's control files: {', '.join(changed)}; serve will not reload "
            "jobs.yaml until an operator checks them and runs `runner serve reload`"
        )

    def open_backend(self) -> None:
        """The job's backend; an agent job's local commands in a sandbox that shows the machine as
        ``sandbox_plan`` says (``runner.backends.sandbox``), Docker with the control files read-only."""

        assert self.control is not None, "protect() runs first"
        workdir = Path(self.req.workdir or self.job.workdir)
        plan = sandbox_plan(self.settings, self.job, self.control, workdir) if self.job.sandboxed else None
        protected: tuple[Path, ...] = ()  # what Docker mounts read-only over itself
        if self.job.spec.backend.type == "docker":
            protected = tuple(sorted({*self.control.inside_workdir(), *masks_inside(self.settings, (str(workdir),))}))
        ctx = BackendContext(
            workdir=workdir,
            home=self.settings.home,
            run_id=self.run_id,
            job=self.job.name,
            env_passthrough=tuple(self.job.spec.env_passthrough),
            env={
                "RUNNER_RUN_ID": self.run_id,
                "RUNNER_JOB": self.job.name,
                **(self.req.task.env() if self.req.task is not None else {}),
            },
            protected=protected,
            sandbox=plan,
            cut=self.cut,
        )
        self._backend = backends.resolve(self.job.spec.backend, ctx=ctx)
        if plan is not None:
            self.emit(Event.SANDBOX, Sandbox(plan.network, [plan.workdir, *plan.writable]))
        self.control = self.control.seen_from(self._backend.workdir)

    def pre_run(self) -> Produced | None:
        """Run the job's ``pre_run``; what it did may end the run here (``prerun.verdict``): a cut,
        the run's own timeout, a failure under ``pre_run_failure: fail`` (or of a script-only job),
        ``{"wake": false}``, an empty stdout under ``skip_when_empty``. It counts against the run's
        own ``timeout:`` (the deadline the agent loop keeps too): past it the run stops the script's
        tree and ends ``timed_out`` by itself, with or without serve."""
        spec = self.job.spec
        if not spec.pre_run:
            return None
        if spec.agent and self.journal.resuming:  # its output is in the journaled prompt: not run again
            return None

        check_pre(self.job, self.gate.check)
        key = self.journal.key("pre_run")
        pre = self.pre = run_pre(self.job, self.backend, run_id=self.run_id, deadline=self.deadline, step_key=key)
        # a script-only run ends a few milliseconds later: its pre_run event is written with its last
        cut = self.cut.is_set() or None  # cancelled, or declared lost: the script was ended
        event = PreRun(pre.exit_code, pre.timed_out, pre.stdout[-4000:], cut, stderr=pre.stderr or None)
        self.emit(Event.PRE_RUN, event, hold=not spec.agent)
        if cut:
            return Produced(RunStatus.INTERRUPTED, reason="interrupted", error="the run's pre_run was cut")
        if pre.run_timeout:
            return pre_run_timed_out(spec.timeout)
        found = verdict(pre, policy=spec.pre_run_failure, agent=spec.agent, skip_when_empty=spec.skip_when_empty)
        if found == Verdict.FAIL:
            return pre_run_failed(pre, self.redactor)
        if found == Verdict.WAKE_FALSE:
            return Produced(RunStatus.SKIPPED, reason=Reason.WAKE_FALSE)
        if found == Verdict.EMPTY:
            return Produced(
                RunStatus.SKIPPED, reason=Reason.PRE_RUN_EMPTY, error="pre_run printed nothing (skip_when_empty: true)"
            )
        return None

    @cached_property
    def gate(self) -> Gate:
        """The run's approval gate, frozen at first use (after the backend is open): pre_run and
        the agent's commands go through the same one."""

        policy = self.job.spec.approvals
        return build_gate(
            self.job,
            record=audit_recorder(self.settings.store, self.run_id, policy, self.emit, self.redactor),
            interactive=self.req.interactive,
            control=self.control,
            parking=self.parking(),
            judge=self.judge if policy == Approvals.SMART else None,
        )

    def parking(self) -> Parking | None:
        """``approvals: manual`` (or a command ``smart``'s judge escalates) with nobody at a
        terminal: a dangerous command parks the run until a person answers
        (``runner.run.parked``); None otherwise."""
        if self.job.spec.approvals not in (Approvals.MANUAL, Approvals.SMART) or self.req.interactive:
            return None

        return Parking(
            store=self.settings.store,
            run_id=self.run_id,
            job=self.job.name,
            timeout=self.job.spec.approval_timeout,
            deadline=lambda: self.loop_deadline,
            stop=self.req.stop,
            redact=self.redactor,
            emit=self.emit,
            notify=self.alert_approval,
            cancelled_by=lambda: self.cancel.by,
        )

    def judge(self, person: Callback) -> Judge:
        """``approvals: smart``: the auxiliary model judges a flagged command; ``person`` decides
        what it escalates (``runner.safety.judge``)."""
        producer = self.prepared.producer
        prompt = producer.source if isinstance(producer, AgentOutput) else ""
        return Judge(
            model=lambda: self.judge_model,
            job=self.job.name,
            summary=self.redactor(summary_of(self.job.spec.description, prompt)),
            timeout=self.job.spec.smart_timeout,
            escalate=person,
            redact=self.redactor,
            spent=self.judged,
            deadline=lambda: self.loop_deadline,
        )

    @cached_property
    def judge_model(self) -> AuxiliaryModel | None:
        """The auxiliary model, built at the judge's first question (None: none is configured, or
        the run replays a cassette)."""
        producer = self.prepared.producer
        if not isinstance(producer, AgentOutput):
            return None
        return producer.models.auxiliary_model(emit=self.emit)

    def judged(self, reply: JudgeReply, ruling: Ruling) -> None:
        """The judge's reply: an ``approval_judged`` event with its cost (the budget settlement
        counts it under the provider that answered) and its tokens and cost in the run's totals."""
        usage = reply.usage
        cost = round(reply.cost_usd, 6)
        self.emit(
            Event.APPROVAL_JUDGED,
            SideCall(
                reply.model,
                reply.provider,
                usage.prompt_tokens,
                usage.completion_tokens,
                cost,
                outcome=str(ruling.verdict),
                why=ruling.reason,
            ),
        )
        self.side_calls.add(Usage(usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens), reply.cost_usd)

    def alert_approval(self, request: ApprovalRequest) -> None:
        """The alert of a parked approval, naming the command that answers it."""
        self.alerter.approval_needed(self.job, request)

    @cached_property
    def variables(self) -> dict[str, Any]:
        """The template variables of this run (prompt and ``file:PATH`` delivery), built once after pre_run."""
        req = self.req
        run = {"id": self.run_id, "slot": req.slot.isoformat() if req.slot else None, "trigger": str(req.trigger)}
        return template_variables(
            self.job,
            now=self.now,
            run=run,
            vars_override=dict(req.vars_override),
            pre_run=self.pre.as_vars() if self.pre else None,
            last_output=last_output(self.settings.store, self.job.name),
            context=self.context_outputs(),
            **event_variables(self.settings.store, self.run_id, str(req.trigger), redact=self.redactor),
        )

    def context_outputs(self) -> dict[str, str]:
        """The last successful output of each ``context_from`` job, redacted and capped ("" when none)."""

        store = self.settings.store
        return {other: capped_context(self.redactor(last_output(store, other))) for other in self.job.spec.context_from}

    def record_model(self, model: str) -> None:
        """The model that answered last (a fallback provider's, once it took over)."""
        ledger.set_fields(self.settings.store, self.run_id, model=model)

    def conclude(self, produced: Produced) -> RunOutcome:
        """Write the output (redacted) and deliver it unless it is silent or empty."""
        output = self.redactor(produced.output)
        path = self.write_output(output) if output or produced.silent else None
        delivery: tuple[dict[str, Any], ...] = ()
        if output and not produced.silent:
            delivery = self.deliver(output, produced.status, path)
        return RunOutcome(
            self.run_id,
            produced.status,
            output=output,
            reason=produced.reason,
            error=produced.error,
            output_path=str(path) if path else None,
            silent=produced.silent,
            delivery=delivery,
        )

    def write_output(self, output: str) -> Path:
        path = self.settings.home / "outputs" / self.job.name / f"{self.run_id}.md"
        write_run_file(path, output)
        keep(self.settings.store, self.run_id, FileKind.OUTPUT, output)  # PostgreSQL: other machines show it
        return path

    @cached_property
    def alerter(self) -> Alerter:
        return Alerter(
            self.settings.store,
            self.settings.config,
            home=self.settings.home,
            base_dir=self.job.base_dir,
            redactor=self.redactor,
            stdout=self.req.stdout,
            emit=self.emit,
        )

    def deliver(self, output: str, status: RunStatus, path: Path | None) -> tuple[dict[str, Any], ...]:
        """Send the output to the job's sinks; record each result and ``delivery_failed`` on the row.
        A run whose row someone else ended meanwhile (declared lost: a retry may be running) delivers
        nothing: its fence."""
        if not self.req.deliver:
            self.emit(Event.DELIVERED, Delivered(skipped="--no-deliver"))
            return ()
        if self.fenced():
            return ()

        ctx = SendContext(
            self.settings.config,
            base_dir=self.job.base_dir,
            home=self.settings.home,
            redactor=self.redactor,
            stdout=self.req.stdout,
        )
        journal = self.journal
        out = Output(self.job, self.run_id, status, output, path, self.variables, key=journal.key("deliver"))
        store = self.settings.store
        delivered = deliver(
            out,
            ctx,
            lambda text, variables, name: render(text, variables, name=name, base=self.job.base_dir),
            done=lambda key: step_done(store, key),
            mark=lambda key, sink: mark_done(store, key, root=journal.root, run_id=self.run_id, what=f"deliver {sink}"),
        )
        sinks = tuple(self.redactor.redact_obj([d.as_dict() for d in delivered]))
        failed = [d for d in delivered if not d.ok]
        self.emit(Event.DELIVERED, Delivered(sinks=list(sinks)))
        ledger.set_fields(self.settings.store, self.run_id, delivery=dumps(list(sinks)), delivery_failed=int(bool(failed)))
        self.alerter.delivery(self.job, RunEnd(self.job.name, self.run_id, status, tail=tail(output)), delivered)
        return sinks

    def failed(self, exc: RunnerError) -> RunOutcome:
        reason, error = failure_reason(exc), self.redactor(str(exc))
        if not isinstance(exc, StoreError):  # a store fault is told by the row alone: an event may not fit
            self.emit(Event.ERROR, Failure(reason, error))
        return RunOutcome(self.run_id, RunStatus.FAILED, reason=reason, error=error)

    def cancelled(self, result: RunOutcome) -> RunOutcome:
        """An interruption that a cancel request caused says so (reason ``cancelled``, who asked)."""
        by = self.cancel.by
        if by is None or result.status != RunStatus.INTERRUPTED:
            return result
        self.emit(Event.CANCELLED, By(by))
        return replace(result, reason="cancelled", error=f"cancelled by {by} (runner runs cancel)")

    def supervised(self, result: RunOutcome) -> RunOutcome:
        """A run its supervisor stopped (serve: the job's timeout, shutdown, a newer slot) records
        why, as the ledger's stop request says."""
        if result.status in (RunStatus.SUCCEEDED, RunStatus.SKIPPED) or not self.req.stop.is_set():
            return result
        why = ledger.stop_reason(self.settings.store, self.run_id)
        if why is None:
            return result
        status, reason, error = ledger.stop_outcome(why, self.job.spec.timeout)
        return replace(result, status=status, reason=reason, error=error)

    def fenced(self) -> bool:
        """Whether someone else ended this run's row (then a ``fenced`` event says so)."""
        row = ledger.fenced_out(self.settings.store, self.run_id)
        if row is None:
            return False
        self.emit(Event.FENCED, Fenced(row.status, row.reason, row.error))
        return True

    def save_transcript(self, messages: list[dict[str, Any]]) -> Path:
        """The conversation as sent to the model (after pruning), redacted, for post-mortems."""

        path = self.settings.home / "logs" / "runs" / f"{self.run_id}.json"
        text = json.dumps(self.redactor.redact_obj(messages), ensure_ascii=False, indent=1)
        write_run_file(path, text)
        keep(self.settings.store, self.run_id, FileKind.TRANSCRIPT, text)
        return path

    def finish(self) -> None:
        """Close the backend and give the row its final status (always, from ``go``'s ``finally``)."""
        self.cancel.close()
        if self._backend is not None:
            self._backend.close()
        self.result = self.supervised(self.cancelled(self.result))
        try:
            self.check_tamper()  # a run that failed or was interrupted is checked too
        except Tampered as exc:
            self.result = self.failed(exc)
        r = self.result
        ended = utcnow()
        for steer in self.inbox.left():  # came after the model's last request
            self.emit(Event.STEER_UNDELIVERED, steer)
        with self.settings.store.transaction():  # the final status and its event in one write
            opened: Opened | None = self.__dict__.get("opened")  # None: it never got to open its journal
            replayed = opened.journal.replayed_steers if opened is not None else []  # an earlier attempt gave them
            given = [*replayed, *self.inbox.delivered()]
            settle_steers(self.settings.store, self.run_id, given, now=ended)
            won = ledger.finish(
                self.settings.store,
                self.run_id,
                r.status,
                now=ended,
                reason=r.reason,
                error=r.error,
                output_path=r.output_path,
            )
            seconds = round(time.monotonic() - self.started, 3)
            self.emit(Event.RUN_FINISHED, RunFinished(r.status, r.reason, seconds))
        if not won:  # someone else recorded its end (declared it lost): theirs stands, no alert from here
            self.fenced()
            return
        if r.output and not r.silent:  # redacted by ``conclude``; searchable (``runner runs search``)
            index_output(self.settings.store, self.run_id, self.job.name, r.output, ended=ended)
        stopped = self.req.stop.is_set() and r.status != RunStatus.SUCCEEDED
        if self.req.deliver and not stopped:  # stopped by a signal: whoever sent it decides (serve alerts)
            text = tail(r.output) if r.output else tail_of_run(self.settings.store, self.run_id)
            self.alerter.run_ended(self.job, RunEnd(self.job.name, self.run_id, r.status, r.reason, r.error, text))
