"""The ``kanban`` toolset.

In a kanban worker (``HERMES_KANBAN_TASK`` set and the worker's task session in the context)
the model gets ``kanban_show``, ``kanban_comment``, ``kanban_complete``, ``kanban_block`` and
``kanban_create``; each acts only on that task (none takes a task id) and every write carries
the worker's fence. A job that lists ``kanban`` outside a worker (an orchestrator) gets
``kanban_create`` and ``kanban_list`` only. ``kanban_create`` refuses a job whose latitude is
wider than the run's own job (``runner.safety.latitude``: looser ``approvals:``, or ``allow:``
patterns the run's job lacks): a ``deny`` job cannot get work done by an ``approve`` job.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from runner.clock import utcnow
from runner.errors import RunnerError, StoreError
from runner.safety.latitude import Latitude
from runner.safety.redact import Redactor
from runner.statuses import TaskStatus
from runner.tools import Registry, ToolError, ToolResult, compact_json, no_files
from runner.tools.context import ToolContext

if TYPE_CHECKING:
    from runner.settings import Settings
    from runner.store.board import Board

ENV_TASK = "HERMES_KANBAN_TASK"
LIST_LIMIT = 100


class KanbanTask(Protocol):
    """The task a worker holds (runner.kanban.work.TaskSession)."""

    task_id: int

    def show(self) -> dict[str, Any]: ...
    def comment(self, text: str) -> None: ...
    def complete(self, result: str) -> None: ...
    def block(self, reason: str) -> None: ...
    def create(self, title: str, body: str, *, priority: int, job: str | None) -> int: ...


def _session(ctx: ToolContext) -> KanbanTask | None:
    """The worker's task session, only when HERMES_KANBAN_TASK names that very task."""
    raw = os.environ.get(ENV_TASK)
    session = ctx.kanban
    if not raw or session is None:
        return None
    return session if str(getattr(session, "task_id", "")) == raw.strip() else None


def in_task(ctx: ToolContext) -> bool:
    return _session(ctx) is not None


def orchestrator(ctx: ToolContext) -> bool:
    return not os.environ.get(ENV_TASK) and ctx.settings is not None


def _settings(ctx: ToolContext) -> Settings:
    if ctx.settings is None:  # the tools that need it are only offered with settings
        raise ToolError("the kanban board is not available in this run")
    return ctx.settings


@contextmanager
def _board(ctx: ToolContext) -> Iterator[Board]:
    from runner.store.board import Board

    board = Board(_settings(ctx).store)
    try:
        yield board
    finally:
        board.close()


def _task(ctx: ToolContext) -> KanbanTask:
    session = _session(ctx)
    if session is None:
        raise ToolError("no kanban task is assigned to this run")
    return session


def _text(args: dict[str, Any], name: str) -> str:
    value = args.get(name)
    if not isinstance(value, str) or not value.strip():
        raise ToolError(f"{name!r} must be a non-empty string")
    return value


def _call(fn: Any, *args: Any, **kw: Any) -> Any:
    """Board problems the model can act on (bad job name, task already ended) become tool errors;
    a refused fence is not one of them: it ends the run."""
    from runner.store.tasks import FenceError

    try:
        return fn(*args, **kw)
    except (FenceError, StoreError):  # a store fault ends the run (store_error); the model cannot fix it
        raise
    except RunnerError as exc:
        raise ToolError(str(exc)) from None


def kanban_show(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    return ToolResult(compact_json(_task(ctx).show()))


def kanban_comment(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    _call(_task(ctx).comment, _text(args, "text"))
    return ToolResult("comment added")


def kanban_complete(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    task = _task(ctx)
    _call(task.complete, _text(args, "result"))
    return ToolResult(f"task {task.task_id} is done. Reply with a one-line summary; do not call more tools.")


def kanban_block(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    task = _task(ctx)
    _call(task.block, _text(args, "reason"))
    return ToolResult(f"task {task.task_id} is blocked. Reply with a one-line summary; do not call more tools.")


def kanban_create(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    title, body = _text(args, "title"), args.get("body") or ""
    priority, job = args.get("priority", 0), args.get("job")
    parents = args.get("parents") or []
    if not isinstance(body, str) or (job is not None and not isinstance(job, str)):
        raise ToolError("'body' and 'job' must be strings")
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ToolError("'priority' must be an integer")
    session = _session(ctx)
    if session is not None:
        if parents:
            raise ToolError("inside a task, new tasks are children of this task; 'parents' is not allowed")
        child = _call(session.create, title, body, priority=priority, job=_check_job(ctx, job, fallback=True))
        return ToolResult(
            f"created task {child} as a child of task {session.task_id}; it becomes ready when this task is done"
        )
    if not isinstance(parents, list) or not all(isinstance(p, int) and not isinstance(p, bool) for p in parents):
        raise ToolError("'parents' must be a list of task ids")

    settings, redact = _settings(ctx), Redactor()
    with _board(ctx) as board:
        new_id = _call(
            board.add,
            redact(title),
            now=utcnow(),
            body=redact(body),
            parents=parents,
            priority=priority,
            job=_check_job(ctx, job),
            max_attempts=settings.config.kanban.max_attempts,
            created_by=f"run:{ctx.run_id}",
        )
    return ToolResult(f"created task {new_id}")


def _check_job(ctx: ToolContext, job: str | None, *, fallback: bool = False) -> str | None:
    """The job a new task will run: ``job``, else kanban.default_job, else (inside a task) the task's own."""
    settings = ctx.settings
    if settings is None:
        return job
    name = job or settings.config.kanban.default_job
    if name is None:
        if fallback:
            return None  # the child runs the job of the task this run works on: this run's own
        raise ToolError("no job for the new task: pass 'job' (a jobs.yaml entry); kanban.default_job is not set")
    _no_wider(ctx, settings, _call(settings.jobs.get, name))
    return str(name)


def _no_wider(ctx: ToolContext, settings: Settings, target: Any) -> None:
    """ToolError when a task for ``target`` would run with more latitude than this run's job."""

    if not ctx.job_name:
        raise ToolError("this run names no job, so it cannot hand work to one")
    creator = _call(settings.jobs.get, ctx.job_name)
    why = Latitude.of(target.spec).wider_than(Latitude.of(creator.spec))
    if why is not None:
        raise ToolError(
            f"refused: no task for job {target.name!r}: it may do more without a person than this run's job "
            f"{creator.name!r} ({why}); a person can add it (runner kanban add --job {target.name})"
        )


def kanban_list(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    status = args.get("status")
    with _board(ctx) as board:
        tasks = board.tasks(status=status)
    rows = [{"id": t.id, "title": t.title, "status": t.status, "priority": t.priority, "job": t.job} for t in tasks][
        :LIST_LIMIT
    ]
    return ToolResult(compact_json({"tasks": rows, "total": len(tasks)}))


def register(registry: Registry) -> None:
    obj = {"type": "object", "additionalProperties": False}
    text = {"type": "string"}
    registry.tool(
        "kanban_show",
        "kanban",
        "Show your kanban task: title, body, status, comments and the results of the tasks it depends on.",
        {**obj, "properties": {}},
        in_task,
        changes_files=no_files,
    )(kanban_show)
    registry.tool(
        "kanban_comment",
        "kanban",
        "Add a comment to your kanban task (progress notes for people and later attempts).",
        {**obj, "properties": {"text": text}, "required": ["text"]},
        in_task,
        changes_files=no_files,
    )(kanban_comment)
    registry.tool(
        "kanban_complete",
        "kanban",
        "Mark your kanban task done with its result (what you did or found). This ends the task.",
        {**obj, "properties": {"result": text}, "required": ["result"]},
        in_task,
        changes_files=no_files,
    )(kanban_complete)
    registry.tool(
        "kanban_block",
        "kanban",
        "Mark your kanban task blocked with the reason a person must resolve. This ends the attempt.",
        {**obj, "properties": {"reason": text}, "required": ["reason"]},
        in_task,
        changes_files=no_files,
    )(kanban_block)
    registry.tool(
        "kanban_create",
        "kanban",
        "Create a kanban task. Inside a task it becomes a child of your task and starts after it is done; "
        "otherwise it is ready at once (or after the tasks listed in 'parents').",
        {
            **obj,
            "properties": {
                "title": text,
                "body": text,
                "priority": {"type": "integer", "description": "higher runs first; default 0"},
                "job": {"type": "string", "description": "the jobs.yaml entry that works on it"},
                "parents": {"type": "array", "items": {"type": "integer"}, "description": "task ids it waits for"},
            },
            "required": ["title"],
        },
        lambda ctx: in_task(ctx) or orchestrator(ctx),
        changes_files=no_files,
    )(kanban_create)
    registry.tool(
        "kanban_list",
        "kanban",
        "List kanban tasks (id, title, status, priority, job), optionally only one status.",
        {
            **obj,
            "properties": {
                "status": {"type": "string", "enum": [s.value for s in TaskStatus if s != TaskStatus.ARCHIVED]}
            },
        },
        orchestrator,
        changes_files=no_files,
    )(kanban_list)
