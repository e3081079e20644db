"""``runner kanban work``: one attempt at one task, in the process the dispatcher started.

Reads ``HERMES_KANBAN_TASK`` and ``HERMES_KANBAN_FENCE``, records its pid on the task, renews
the lease every third of ``kanban.lease_seconds`` from a background thread, and runs the task's
job (``task.job``, else ``kanban.default_job``) through the ordinary worker with trigger
``kanban``, so the attempt is a run in the ledger. The task's title, body, comments and its
parents' results are appended to the prompt; the agent ends the task with ``kanban_complete`` or
``kanban_block`` (reminded once if it stops without either). A script-only job completes the
task with its pre_run output on exit 0. Every board write carries the fence: once the claim is
reclaimed the writes are refused and the worker stops.

``forked_main`` is the same worker forked from a warm forkserver (``runner.kanban.dispatch.TaskForkLauncher``):
it does what the ``runner`` program does before ``kanban work`` (hold the keys, become the
subreaper of what its commands start) and what the command does, without an interpreter start.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.clock import utcnow
from runner.config.jobfile import Job
from runner.config.jobs import Resume
from runner.errors import RunnerError, UsageError
from runner.host import secrets
from runner.host.procs import become_subreaper, install_two_stage_stop, start_time
from runner.kanban.dispatch import ENV_FENCE, ENV_TASK
from runner.run.execute import execute
from runner.run.request import RunRequest, TaskHooks
from runner.safety.redact import Redactor
from runner.settings import Settings
from runner.statuses import RunStatus, TaskStatus, Trigger
from runner.store import Store, ledger
from runner.store import journal as journal_rows
from runner.store.board import Board
from runner.store.ledger import RunRow
from runner.store.tasks import FenceError, Task

REMINDER = (
    "You have not ended this kanban task. Call kanban_complete with the result if the work is done, "
    "or kanban_block with the reason if you cannot finish it. Do it now."
)
UNFINISHED = "the worker stopped without calling kanban_complete or kanban_block (reminded once)"
WORKER_AUTHOR = "worker (fence"  # how the comments the model wrote itself are signed
RESULT_CHARS = 4000


@dataclass(frozen=True)
class WorkResult:
    task_id: int
    status: str  # done | blocked | ready (retry later) | failed | refused
    run_id: str | None = None
    detail: str = ""

    @property
    def exit_code(self) -> int:
        return 0 if self.status in (TaskStatus.DONE, TaskStatus.BLOCKED) else 1


def read_env(environ: Mapping[str, str]) -> tuple[int, int]:
    raw_task, raw_fence = environ.get(ENV_TASK, ""), environ.get(ENV_FENCE, "")
    if not raw_task:
        raise UsageError(f"{ENV_TASK} is not set; `runner kanban work` is started by the dispatcher")
    if not raw_fence:
        raise UsageError(f"{ENV_FENCE} is not set; `runner kanban work` is started by the dispatcher with its claim")
    try:
        return int(raw_task), int(raw_fence)
    except ValueError:
        raise UsageError(f"{ENV_TASK}={raw_task!r} / {ENV_FENCE}={raw_fence!r}: expected integers") from None


def job_for(settings: Settings, task: Task) -> Job:
    name = task.job or settings.config.kanban.default_job
    if not name:
        raise UsageError(
            f"task {task.id} names no job and config.yaml sets no kanban.default_job; "
            "give the task one (runner kanban add --job NAME) or set kanban.default_job"
        )
    return settings.jobs.get(name)


def task_prompt(board: Board, task: Task) -> str:
    """The task as the model sees it: title, body, comments and the results of its parents."""
    parts = [f"## Kanban task {task.id}: {task.title}"]
    if task.body.strip():
        parts.append(task.body.strip())
    comments = board.comments(task.id)
    if comments:
        parts.append(
            "Comments:\n" + "\n".join(f"- {c['author']} ({c['created_at'][:16]}): {c['body']}" for c in comments)
        )
    done = [p for p in board.parents(task.id) if p.status == TaskStatus.DONE]
    if done:
        lines = [f'- task {p.id} "{p.title}": {(p.result or "").strip()[:RESULT_CHARS]}' for p in done]
        parts.append("Results of the tasks this one depends on:\n" + "\n".join(lines))
    if task.attempts > 1 and task.error:
        parts.append(f"This is attempt {task.attempts} of {task.max_attempts}; the last one failed: {task.error}")
    parts.append(
        "End the task with kanban_complete(result) when the work is done, or kanban_block(reason) "
        "if you cannot proceed without help."
    )
    return "\n\n".join(parts)


def lost_attempt(settings: Settings, task: Task, job: Job, run_id: str | None) -> RunRow | None:
    """The run this attempt resumes: the task's last run when its worker was lost and the job is an
    agent job with ``resume: auto`` (docs/runs.md#durable-runs); else None (it starts over)."""
    if task.attempts <= 1 or not job.spec.agent or job.spec.resume != Resume.AUTO:
        return None
    return journal_rows.lost_task_attempt(settings.store, str(task.id), besides=run_id)


def resume_note(board: Board, task: Task, before: RunRow, store: Store) -> str:
    """What the resumed attempt's model is told before its first live request: the attempt, why
    the last one ended, and the comments on the task its history does not hold (the first
    attempt's prompt and the messages given to it are replayed; a comment written while no
    attempt ran, or one the lost attempt had not given its model yet, is in none of them)."""
    seen = _journal_texts(journal_rows.entries(store, journal_rows.key_of(store, before.id)))
    missed = [
        c
        for c in board.comments(task.id)
        if not str(c["author"]).startswith(WORKER_AUTHOR) and str(c["body"]).strip()[:200] not in seen
    ]
    why = task.error or f"the run ended {before.status}"
    parts = [
        f"This is attempt {task.attempts} of {task.max_attempts} at kanban task {task.id}. The worker of "
        f"the last attempt was lost ({why}); this run resumes from its last completed step, so the "
        "conversation above is what that attempt did."
    ]
    if missed:
        lines = [f"- {c['author']} ({str(c['created_at'])[:16]}): {c['body']}" for c in missed]
        parts.append("Comments on the task that this conversation does not hold yet:\n" + "\n".join(lines))
    return "\n\n".join(parts)


def _journal_texts(entries: list[journal_rows.Entry]) -> str:
    """Every text the journal says the model was given as a user message: the first messages and
    the messages sent while it ran."""
    texts: list[str] = []
    for e in entries:
        if e.turn == 0 and e.call_id == journal_rows.TURN:
            texts += [str(m.get("content") or "") for m in e.body if isinstance(m, dict)]
        elif e.call_id == journal_rows.STEERS:
            texts += [str(m.get("text") or "") for m in e.body if isinstance(m, dict)]
    return "\n".join(texts)


class TaskSession:
    """The task a worker holds, as the kanban tools use it. Every write carries the fence."""

    def __init__(self, board: Board, task: Task, fence: int, settings: Settings):
        self.board, self.task_id, self.fence, self.settings = board, task.id, fence, settings
        self.job = task.job
        self.ended: TaskStatus | None = None  # done or blocked once this worker ended the task
        self.lost = False  # the claim was reclaimed: every further write is refused
        self.run_id: str | None = None
        self.redact = Redactor()  # what the model writes to the board is masked like its run events

    def show(self) -> dict[str, Any]:
        task = self.board.get(self.task_id)
        parents = self.board.parents(self.task_id)
        return {
            "task": {k: v for k, v in task.as_dict().items() if k in ("id", "title", "body", "status", "priority")},
            "attempt": task.attempts,
            "comments": self.board.comments(self.task_id),
            "parents": [{"id": p.id, "title": p.title, "status": p.status, "result": p.result} for p in parents],
        }

    def comment(self, text: str) -> None:
        self._write(
            self.board.comment,
            self.task_id,
            self.redact(text),
            now=utcnow(),
            author=f"{WORKER_AUTHOR} {self.fence})",
            fence=self.fence,
        )

    def complete(self, result: str) -> None:
        self._write(self.board.complete, self.task_id, self.fence, self.redact(result), now=utcnow())
        self.ended = TaskStatus.DONE

    def block(self, reason: str) -> None:
        reason = self.redact(reason)
        self._write(self.board.block, self.task_id, reason, now=utcnow(), fence=self.fence, actor="worker")
        self.ended = TaskStatus.BLOCKED

    def create(self, title: str, body: str, *, priority: int, job: str | None) -> int:
        task_id = self._write(
            self.board.add,
            self.redact(title),
            now=utcnow(),
            body=self.redact(body),
            parents=[self.task_id],
            priority=priority,
            job=job or self.job,
            max_attempts=self.settings.config.kanban.max_attempts,
            created_by=f"task:{self.task_id}",
            fence=(self.task_id, self.fence),
        )
        return int(task_id)

    def reminder(self) -> str | None:
        return None if self.ended or self.lost else REMINDER

    def _write(self, fn: Any, *args: Any, **kw: Any) -> Any:
        if self.lost:
            raise FenceError(self.task_id, self.fence, None, None, "write")
        if self.ended:
            raise UsageError(f"task {self.task_id} is already {self.ended}; reply with a short final message")
        try:
            return fn(*args, **kw)
        except FenceError:
            self.lost = True
            raise


class LeaseKeeper:
    """Renews the lease every third of ``lease_seconds`` from a thread with its own connection;
    calls ``on_lost`` once a renewal is refused (the session knows whether it ended the task itself)."""

    def __init__(self, db: Path, task_id: int, fence: int, *, lease_seconds: float, on_lost: Callable[[], None]):
        self.db, self.task_id, self.fence, self.lease_seconds = db, task_id, fence, lease_seconds
        self.on_lost = on_lost
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-{task_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        store = Store.open(self.db, migrate=False)
        board = Board(store)
        try:
            while not self._stop.wait(self.lease_seconds / 3):
                try:
                    state = board.renew(self.task_id, self.fence, now=utcnow(), lease_seconds=self.lease_seconds)
                except sqlite3.OperationalError as exc:  # locked past the busy timeout: try again next time
                    print(f"kanban: lease renewal for task {self.task_id} failed: {exc}", file=sys.stderr, flush=True)
                    continue
                if state != "renewed":
                    self.on_lost()  # the session tells a task it ended itself from one taken away
                    return
        finally:
            board.close()
            store.close()


@dataclass(frozen=True)
class Assignment:
    """What a ``runner worker`` adds to an attempt it took (``runner.dist.kanban_worker``): the queued
    run row made for it (the worker's heartbeat covers it), the worker's name (recorded as the task's
    host, so no dispatcher ever signals a process of another machine) and the lease the dispatcher
    claimed with (renewed at a third of it, whatever this machine's config says)."""

    run_id: str
    worker: str
    lease_seconds: float


def work(
    settings: Settings,
    environ: Mapping[str, str],
    *,
    stop: threading.Event | None = None,
    assignment: Assignment | None = None,
) -> WorkResult:
    """Run one attempt of the task named in ``environ`` (``assignment``: a ``runner worker``'s)."""
    task_id, fence = read_env(environ)
    stop = stop or threading.Event()
    board = Board(settings.store) if assignment is None else Board(settings.store, host=assignment.worker)
    try:
        board.attach(task_id, fence, pid=os.getpid(), pid_start=start_time(os.getpid()), now=utcnow())
    except FenceError as exc:
        board.close()
        return WorkResult(task_id, "refused", detail=str(exc))
    session = TaskSession(board, board.get(task_id), fence, settings)

    def lost() -> None:
        if not session.ended:
            session.lost = True
            stop.set()

    lease = settings.config.kanban.lease_seconds if assignment is None else assignment.lease_seconds
    keeper = LeaseKeeper(board.store.path, task_id, fence, lease_seconds=lease, on_lost=lost)
    keeper.start()
    try:
        result = _attempt(settings, session, stop, assignment.run_id if assignment else None)
    except FenceError as exc:
        result = WorkResult(task_id, "refused", session.run_id, str(exc))
    finally:
        keeper.stop()
        board.close()
    # The run itself may have gone well, but its work was refused: the ledger says so.
    if result.status == "refused" and result.run_id and not ledger.refuse_result(settings.store, result.run_id, error=result.detail):
        ledger.finish(settings.store, result.run_id, RunStatus.FAILED, reason=ledger.Reason.REFUSED, error=result.detail)
    return result


def _attempt(settings: Settings, session: TaskSession, stop: threading.Event, run_id: str | None) -> WorkResult:
    board, task_id, fence = session.board, session.task_id, session.fence
    task = board.get(task_id)
    job, outcome = None, None
    try:
        job = job_for(settings, task)
        before = lost_attempt(settings, task, job, run_id)
        if before is not None and run_id is not None:  # a ``runner worker``'s queued row: it becomes the next attempt
            ledger.set_fields(settings.store, run_id, parent_run=before.parent_run or before.id, attempt=before.attempt + 1)
        hooks = TaskHooks(
            task_id=str(task_id),
            session=session,
            prompt=task_prompt(board, task),
            follow_up=session.reminder,
            fence=fence,
            resume_note=resume_note(board, task, before, settings.store) if before is not None else None,
        )
        req = RunRequest(
            job=job,
            trigger=Trigger.KANBAN,
            run_id=run_id,
            workdir=None if job.spec.workdir else workspace(settings, task_id),
            stop=stop,
            task=hooks,
            resumes=before.id if before is not None and run_id is None else None,
        )
        outcome = execute(settings, req)
        session.run_id = outcome.run_id
        error = outcome.error or f"the run ended {outcome.status}" + (f" ({outcome.reason})" if outcome.reason else "")
        if outcome.reason == "unfinished":
            error = UNFINISHED
    except RunnerError as exc:
        error = session.redact(str(exc))
    run_id = session.run_id or run_id
    if session.lost:
        return WorkResult(task_id, "refused", run_id, "the claim was reclaimed; this worker's writes are refused")
    if session.ended:
        return WorkResult(task_id, session.ended, run_id)
    completed = outcome is not None and outcome.status in (RunStatus.SUCCEEDED, RunStatus.SKIPPED)
    if completed and outcome is not None and outcome.reason == "budget":
        completed = False  # a budget cap kept the run from starting: the attempt fails, retried after the backoff
    if completed and outcome is not None and job is not None:
        if not job.spec.agent:
            board.complete(task_id, fence, outcome.output, now=utcnow())
            return WorkResult(task_id, TaskStatus.DONE, run_id)
        if outcome.status == RunStatus.SKIPPED:
            board.complete(task_id, fence, "(skipped: the pre_run said there is nothing to do)", now=utcnow())
            return WorkResult(task_id, TaskStatus.DONE, run_id)
        error = UNFINISHED
    status = board.fail_attempt(task_id, fence, error, now=utcnow(), backoff=settings.config.kanban.retry_backoff)
    return WorkResult(task_id, status, run_id, error)


def workspace(settings: Settings, task_id: int) -> Path:
    path = settings.home / "workspaces" / str(task_id)
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def forked_main(
    home: str,
    jobs_path: str,
    config_path: str,
    config_given: bool,
    held: dict[str, str],
    assignment: Assignment | None = None,
) -> None:
    """The body of a kanban worker forked from the warm forkserver: one attempt at the task in
    ``HERMES_KANBAN_TASK``, its line and exit code as ``runner kanban work`` gives them;
    ``assignment``: a ``runner worker``'s attempt."""

    secrets.install(held)  # the keys came through the forkserver's socket, never an environment block
    become_subreaper()  # what the run's commands leave behind ends with the worker
    stop = threading.Event()
    install_two_stage_stop(stop)
    settings = Settings(
        home=Path(home), jobs_path=Path(jobs_path), config_path=Path(config_path), config_given=config_given
    )
    try:
        result = work(settings, os.environ, stop=stop, assignment=assignment)
    except RunnerError as exc:
        for line in str(exc).splitlines() or [type(exc).__name__]:
            print(f"error: {line}", file=sys.stderr)
        sys.exit(exc.exit_code)
    line = f"task {result.task_id}: {result.status}" + (f" (run {result.run_id})" if result.run_id else "")
    if result.detail:
        line += f": {result.detail}"
    print(line, file=sys.stderr if result.exit_code else sys.stdout)
    sys.exit(result.exit_code)
