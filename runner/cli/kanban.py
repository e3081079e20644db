"""``runner kanban add | list | show | move | comment | block | unblock | retry | archive | dispatch | work``."""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import TYPE_CHECKING, Any

import click

from runner.cli import _style
from runner.cli._complete import job_names
from runner.cli._util import ago, echo_json, local_time, run_json, settings
from runner.statuses import TaskStatus

PRIORITY_MIN, PRIORITY_MAX = -(2**63), 2**63 - 1  # what SQLite's INTEGER holds

if TYPE_CHECKING:
    from collections.abc import Callable

    from runner.kanban.dispatch import Dispatcher, DispatchTick
    from runner.store.board import Board


@click.group("kanban")
def kanban_group() -> None:
    """The task board: add tasks, watch them, run the dispatcher and its workers."""


def _board() -> Board:
    from runner.store.board import Board

    return Board(settings().store)


def _id(raw: str) -> int:
    from runner.errors import UsageError

    text = raw.lstrip("#")
    if not text.isdigit():
        raise UsageError(f"task id must be a number (see: runner kanban list), got {raw!r}")
    return int(text)


def _now() -> Any:
    from runner.clock import utcnow

    return utcnow()


@kanban_group.command("add")
@click.argument("title")
@click.option("--body", default="", help="what to do, in detail")
@click.option("--parent", "parents", multiple=True, metavar="ID", help="a task this one waits for (repeatable)")
@click.option("--priority", type=int, default=0, show_default=True, help="higher runs first")
@click.option("--job", default=None, shell_complete=job_names, help="the jobs.yaml entry that works on it (default: kanban.default_job)")
@click.option("--max-attempts", type=click.IntRange(min=1), default=None, help="default: kanban.max_attempts (3)")
@click.option("--json", "as_json", is_flag=True)
def kanban_add(
    title: str,
    body: str,
    parents: tuple[str, ...],
    priority: int,
    job: str | None,
    max_attempts: int | None,
    as_json: bool,
) -> None:
    """Add a task; it is ready at once, or todo until every --parent is done. Prints its id."""
    from runner.errors import UsageError

    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise UsageError(f"kanban add: --priority {priority} is out of range ({PRIORITY_MIN} to {PRIORITY_MAX})")
    s = settings()
    cfg = s.config.kanban
    name = job or cfg.default_job
    if name is None:
        raise UsageError("no job for this task: pass --job NAME or set kanban.default_job in config.yaml")
    s.jobs.get(name)
    board = _board()
    task_id = board.add(
        title,
        now=_now(),
        body=body,
        parents=[_id(p) for p in parents],
        priority=priority,
        job=job,
        max_attempts=max_attempts or cfg.max_attempts,
    )
    if as_json:
        echo_json(board.get(task_id).as_dict())
    else:
        click.echo(task_id)


@kanban_group.command("list")
@click.option("--status", type=click.Choice([s.value for s in TaskStatus]), help="only this status")
@click.option("--all", "show_all", is_flag=True, help="include archived tasks")
@click.option("--json", "as_json", is_flag=True)
def kanban_list(status: str | None, show_all: bool, as_json: bool) -> None:
    """The board, grouped by status (archived tasks only with --all)."""
    board = _board()
    tasks = board.tasks(status=status, include_archived=show_all)
    if as_json:
        echo_json([t.as_dict() for t in tasks])
        return
    if not tasks:
        click.echo("the board is empty (add a task: runner kanban add TITLE --job NAME)")
        return
    for group in TaskStatus:
        members = [t for t in tasks if t.status == group]
        if not members:
            continue
        _style.echo(f"{_style.status(group.value, text=group.upper())} ({len(members)})")
        for t in members:
            click.echo(f"  #{t.id:<5} p{t.priority:<3} {_clip(t.title, 60):<60}  {_note(board, t)}".rstrip())


def _note(board: Board, t: Any) -> str:
    if t.status == TaskStatus.TODO:
        waiting = [p for p in board.parents(t.id) if p.status != TaskStatus.DONE]
        return "waits for " + ", ".join(f"#{p.id} ({p.status})" for p in waiting)
    if t.status == TaskStatus.RUNNING:
        return f"attempt {t.attempts}/{t.max_attempts}, pid {t.worker_pid or '-'}, lease ends {ago(t.lease_expires)}"
    if t.status == TaskStatus.READY and t.attempts:
        return f"attempt {t.attempts}/{t.max_attempts} failed" + (
            f", retry {ago(t.not_before)}" if t.not_before else ""
        )
    if t.status == TaskStatus.BLOCKED:
        return f"blocked: {_clip(t.reason or '', 60)}"
    if t.status == TaskStatus.FAILED:
        return f"failed: {_clip(t.error or '', 60)}"
    if t.status == TaskStatus.DONE:
        return _clip(t.result or "", 60)
    return t.job or ""


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


@kanban_group.command("show")
@click.argument("task_id")
@click.option("--json", "as_json", is_flag=True)
def kanban_show(task_id: str, as_json: bool) -> None:
    """A task: fields, parents and children, comments, events and each attempt's run."""
    board = _board()
    t = board.get(_id(task_id))
    parents, children = board.parents(t.id), board.children(t.id)
    comments, events, runs = board.comments(t.id), board.events(t.id), board.runs(t.id)
    if as_json:
        echo_json(
            {
                "task": t.as_dict(),
                "parents": [p.as_dict() for p in parents],
                "children": [c.as_dict() for c in children],
                "comments": comments,
                "events": [{**e, "payload": json.loads(e["payload"])} for e in events],
                "runs": [run_json(r) for r in runs],
            }
        )
        return
    click.echo(f"task     #{t.id}  {t.title}")
    _style.echo(
        f"status   {_style.status(t.status)}   attempts {t.attempts}/{t.max_attempts}   fence {t.fence}   priority {t.priority}"
    )
    click.echo(f"job      {t.job or '(kanban.default_job)'}   created {local_time(t.created_at)} by {t.created_by}")
    if t.status == TaskStatus.RUNNING:
        click.echo(f"lease    {t.lease_owner}, pid {t.worker_pid or '-'} on {t.host}, ends {ago(t.lease_expires)}")
    for label, rel in (("parents", parents), ("children", children)):
        if rel:
            click.echo(f"{label:<8} " + ", ".join(f"#{r.id} {_clip(r.title, 40)} ({r.status})" for r in rel))
    for label, value in (("reason", t.reason), ("error", t.error)):
        if value:
            click.echo(f"{label:<8} {value}")
    if t.body.strip():
        click.echo("\nbody:\n" + "\n".join(f"  {line}" for line in t.body.strip().splitlines()))
    if t.result is not None:
        click.echo("\nresult:\n" + "\n".join(f"  {line}" for line in (t.result.strip() or "(empty)").splitlines()))
    if comments:
        click.echo("\ncomments:")
        for c in comments:
            click.echo(f"  {local_time(c['created_at'])}  {c['author']}: {c['body']}")
    click.echo("\nevents:")
    for e in events:
        fence = f" [fence {e['fence']}]" if e["fence"] is not None else ""
        click.echo(
            f"  {local_time(e['ts'])}  {e['kind']}{fence} {_clip(e['payload'], 120) if e['payload'] != '{}' else ''}"
        )
    if runs:
        click.echo("\nattempts (runner runs show RUN):")
        for i, r in enumerate(runs, 1):
            tail = f": {_clip(r['error'], 80)}" if r["error"] else ""
            _style.echo(f"  {i}. {r['id']}  {r['job']}  {_style.status(r['status'])}{tail}")


@kanban_group.command("move")
@click.argument("task_id")
@click.argument("status")
def kanban_move(task_id: str, status: str) -> None:
    """Set a task's status by hand (todo, ready, blocked, done, failed, archived)."""
    t = _board().move(_id(task_id), status, now=_now())
    _style.echo(f"task {t.id}: {_style.status(t.status)}")


@kanban_group.command("comment")
@click.argument("task_id")
@click.argument("text")
def kanban_comment(task_id: str, text: str) -> None:
    """Add a comment (the worker sees comments in its prompt). On a running task the comment also
    goes to the run working on it, as a message its model gets before its next request (as with
    runner runs say; a longer comment than 4,000 characters is cut there)."""
    from runner.store.control import comment_task

    author = os.environ.get("USER") or "user"
    done = comment_task(settings().store, _id(task_id), text, by=author, now=_now())
    if done.steered is not None:
        click.echo(f"task {done.task_id}: comment added and sent to its running run {done.steered}")
    elif done.why is not None:
        click.echo(f"task {done.task_id}: comment added (not sent to the running attempt: {done.why})")
    else:
        click.echo(f"task {done.task_id}: comment added")


@kanban_group.command("block")
@click.argument("task_id")
@click.argument("reason")
def kanban_block(task_id: str, reason: str) -> None:
    """Block a task with a reason (a running worker's claim is revoked)."""
    _board().block(_id(task_id), reason, now=_now())
    click.echo(f"task {_id(task_id)}: blocked")


@kanban_group.command("unblock")
@click.argument("task_id")
def kanban_unblock(task_id: str) -> None:
    """Unblock a task: ready again (todo while a parent is unfinished), with fresh attempts."""
    t = _board().unblock(_id(task_id), now=_now())
    _style.echo(f"task {t.id}: {_style.status(t.status)}")


@kanban_group.command("retry")
@click.argument("task_id")
def kanban_retry(task_id: str) -> None:
    """Give a failed or blocked task one more attempt: ready again (todo while a parent is
    unfinished); its attempts so far stay counted. Any other state exits 2."""
    from runner.store.control import retry_task, whoami

    retry_task(settings().store, _id(task_id), by=whoami())
    t = _board().get(_id(task_id))
    _style.echo(f"task {t.id}: {_style.status(t.status)} (attempt {t.attempts + 1} of {t.max_attempts})")


@kanban_group.command("archive")
@click.argument("task_id")
def kanban_archive(task_id: str) -> None:
    """Archive a task: hidden from the board (runner kanban list --all shows it)."""
    t = _board().move(_id(task_id), TaskStatus.ARCHIVED, now=_now())
    _style.echo(f"task {t.id}: {_style.status(t.status)}")


@kanban_group.command("dispatch")
@click.option("--once", is_flag=True, help="one pass (promote, reclaim, claim, start), then exit")
@click.option("--json", "as_json", is_flag=True, help="print each pass that did something as a JSON line")
def kanban_dispatch(once: bool, as_json: bool) -> None:
    """Run the dispatcher: start a worker for each ready task, up to kanban.max_workers (with
    executor: celery, send each attempt to a runner worker; docs/distributed.md)."""
    from runner.host.procs import two_stage_stop

    dispatcher, ready, close = _dispatcher()

    def report(result: DispatchTick) -> None:
        if as_json:
            if result.busy or once:
                click.echo(json.dumps(_tick_dict(result)))
            return
        for line in _tick_lines(result):
            click.echo(f"{local_time(_now().isoformat())}  {line}")

    try:
        ready()  # before the first claim: a claim's lease runs from the claim, not from the fork
        if once:
            report(dispatcher.tick(_now()))
            return
        with two_stage_stop(threading.Event()) as stop:
            click.echo(
                f"dispatching (max_workers {dispatcher.max_workers}, lease {dispatcher.lease_seconds:g}s); Ctrl-C stops",
                err=True,
            )
            dispatcher.run(stop, on_tick=report, on_error=lambda exc: click.echo(f"error: {exc}", err=True))
        click.echo("dispatcher stopped; running workers finish on their own", err=True)
    finally:
        dispatcher.close()
        close()  # the forkserver exits (the workers it forked keep running), or the broker watcher stops


def _dispatcher() -> tuple[Dispatcher, Callable[[], None], Callable[[], None]]:
    """The dispatcher with its launcher: forked from a warm forkserver, or sent to ``runner
    worker``s under executor: celery; and the launcher's ``ready`` and ``close``."""
    import logging

    from runner.kanban.dispatch import Dispatcher, TaskForkLauncher, warm_forks

    s = settings()
    if s.config.executor.type == "celery":
        from runner.dist.kanban_remote import celery_task_launcher

        remote = celery_task_launcher(s, logging.getLogger("runner.kanban"), recover=True)
        return Dispatcher(s, launcher=remote, capacity=remote), lambda: None, remote.close
    forks = warm_forks()  # workers fork from it: no interpreter start per task
    return Dispatcher(s, launcher=TaskForkLauncher(s, forks)), forks.ready, forks.close


def _tick_dict(r: DispatchTick) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(r)


def _tick_lines(r: DispatchTick) -> list[str]:
    lines = [f"task {t}: ready (parents done)" for t in r.promoted]
    lines += [f"task {x.task_id}: lease expired (owner {x.owner}); now {x.status}" for x in r.reclaimed]
    for e in r.exited:
        lines.append(
            f"task {e.task_id}: worker exited {e.code}" + (f"; task now {e.task_status}" if e.task_status else "")
        )
    lines += [
        f"task {s.task_id}: "
        + (f"started worker pid {s.pid}" if s.pid else "sent to a runner worker")
        + f" (fence {s.fence})"
        for s in r.started
    ]
    lines += [f"task {t}: {err}" for t, err in r.failed_to_start]
    return lines


@kanban_group.command("work")
def kanban_work() -> None:
    """The worker the dispatcher starts: one attempt at the task in HERMES_KANBAN_TASK."""
    from runner.host.procs import install_two_stage_stop
    from runner.kanban.work import work

    stop = threading.Event()
    install_two_stage_stop(stop)
    result = work(settings(), os.environ, stop=stop)
    err = result.exit_code != 0
    line = f"task {result.task_id}: {_style.status(str(result.status), err=err)}"
    line += f" (run {result.run_id})" if result.run_id else ""
    if result.detail:
        line += f": {result.detail}"
    _style.echo(line, err=err)
    sys.exit(result.exit_code)


COMMANDS = [kanban_group]
