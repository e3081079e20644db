"""The words the ledger and the board store, as enums.

``StrEnum`` members are their own string values, so rows read back from SQLite compare equal to
them and JSON output is unchanged.
"""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"  # parked on a manual approval: its process holds it and waits for a person
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    INTERRUPTED = "interrupted"
    SKIPPED = "skipped"
    MISSED = "missed"
    UNKNOWN = "unknown"


FINAL = frozenset(
    {
        RunStatus.SUCCEEDED,
        RunStatus.FAILED,
        RunStatus.TIMED_OUT,
        RunStatus.INTERRUPTED,
        RunStatus.SKIPPED,
        RunStatus.MISSED,
        RunStatus.UNKNOWN,
    }
)
ACTIVE = frozenset({RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING})
# a process holds the run now (it started and has not ended): running, or waiting on an approval
STARTED = frozenset({RunStatus.RUNNING, RunStatus.WAITING})


class Trigger(StrEnum):
    """Why a run started."""

    MANUAL = "manual"  # runner run-job
    SCHEDULE = "schedule"  # a slot of the job's schedule (serve)
    RETRY = "retry"  # a retry of a failed scheduled run (serve)
    KANBAN = "kanban"  # a kanban task's attempt
    DELEGATE = "delegate"  # a subagent started by a run's delegate_task call (runs.parent_run_id)
    WEBHOOK = "webhook"  # a signed POST /hooks/JOB (runner web / serve --web), run by serve's pool
    CHAIN = "chain"  # the job's ``after:`` upstream run ended (serve; hook_chain_links)
    FOLLOWUP = "followup"  # a follow-up a run of the job asked for (schedule_followup; serve)


class ChainWhen(StrEnum):
    """``after: {when: ...}``: which endings of an upstream run start the downstream job."""

    SUCCESS = "success"  # the upstream run succeeded
    FAILURE = "failure"  # it failed, timed out, was interrupted or lost
    ALWAYS = "always"  # any of those (a skipped or missed upstream run never ran: it starts nothing)


class FollowupState(StrEnum):
    """A follow-up's state (``followups.status``)."""

    PENDING = "pending"  # waiting for its time
    FIRED = "fired"  # serve opened its run (``fired_run_id``)
    CANCELLED = "cancelled"  # runner jobs followups cancel


class TaskStatus(StrEnum):
    """A kanban task's column."""

    TODO = "todo"
    READY = "ready"
    RUNNING = "running"
    BLOCKED = "blocked"
    DONE = "done"
    FAILED = "failed"
    ARCHIVED = "archived"


class ApprovalState(StrEnum):
    """A parked approval request's state (``approval_requests.status``)."""

    PENDING = "pending"  # the run waits for a person
    GRANTED = "granted"
    DENIED = "denied"
    EXPIRED = "expired"  # nobody answered within approval_timeout (or the run's own deadline came first)
    CANCELLED = "cancelled"  # the run was cancelled or stopped while it waited
    ABANDONED = "abandoned"  # the run ended without the waiting process seeing an answer (killed, lost)


class ControlKind(StrEnum):
    """What a ``control_requests`` row asks for."""

    TRIGGER = "trigger"  # serve: run this job now (``runner jobs trigger``)
    CANCEL = "cancel"  # the run's own process: cut the current step and stop (``runner runs cancel``)
    STEER = "steer"  # the run's own process: a message for the model before its next request (``runner runs say``)


class HeldState(StrEnum):
    """A memory note held for the operator (``memory_pending.status``)."""

    PENDING = "pending"  # the injection scan flagged it; no run sees it
    ACCEPTED = "accepted"  # the operator stored it in the notebook (``runner memory accept``)
    REJECTED = "rejected"  # the operator dropped it (``runner memory reject``)
