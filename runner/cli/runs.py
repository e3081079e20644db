"""``runner runs list | show | logs | search``: the run ledger and each run's steps."""

from __future__ import annotations

import json
import textwrap
import time
from typing import Any

import click

from runner.cli import _style
from runner.cli._complete import job_names, run_ids
from runner.cli._util import echo_json, local_time, run_json, settings, table
from runner.events import LIVE_ONLY, Recorded, SubagentStarted, cached_share, clip
from runner.statuses import ACTIVE, RunStatus

STATUSES = [s.value for s in RunStatus]
PARTIAL_CHARS = 4000  # of a stopped run's partial answer, in `runs show`


@click.group("runs")
def runs_group() -> None:
    """The run ledger."""


def _queue(row: dict[str, Any]) -> str:
    """Queue wait (written -> the worker took it; the part spent waiting for a slot) and the
    worker's start overhead (took it -> running), for a run serve started."""
    from datetime import datetime

    created, handed, started = (datetime.fromisoformat(row[k]) for k in ("created_at", "dispatched_at", "started_at"))
    queued = (handed - created).total_seconds()
    slot = f" ({row['waited_s']:.3f}s for a slot)" if row.get("waited_s") else ""
    return f"waited {queued:.3f}s{slot}, worker start {(started - handed).total_seconds() * 1000:.0f} ms"


def _duration(row: dict[str, Any]) -> str:
    from datetime import datetime

    if not row.get("started_at") or not row.get("ended_at"):
        return ""
    secs = (datetime.fromisoformat(row["ended_at"]) - datetime.fromisoformat(row["started_at"])).total_seconds()
    return f"{secs:.1f}s"


@runs_group.command("list")
@click.option("--job", help="only this job", shell_complete=job_names)
@click.option("--status", type=click.Choice(STATUSES), help="only runs with this status")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 100000))
@click.option("--delivery-failed", is_flag=True, help="only runs where a delivery sink failed")
@click.option("--json", "as_json", is_flag=True)
def runs_list(job: str | None, status: str | None, limit: int, delivery_failed: bool, as_json: bool) -> None:
    """List recent runs, newest first; DELIVERY is ok, FAILED (a sink failed after its retries) or -.
    A subagent's run (trigger delegate) is marked ``[child]``; its parent's tokens and cost include it.
    A run ``waiting`` is parked on an approval (``runner approvals pending``); a live run's turns,
    tokens and cost count up as it goes."""
    from runner.store.runs import list_runs

    store = settings().store
    rows = list_runs(store, job=job, status=status, limit=limit, delivery_failed=delivery_failed)
    if as_json:
        echo_json([run_json(_with_approval(store, r)) for r in rows])
        return
    if not rows:
        click.echo("no runs")
        return
    table(
        [
            [
                r["id"],
                f"{r['job']} [child]" if r.get("parent_run_id") else r["job"],
                r["trigger"],
                r["status"],
                r["reason"] or "",
                local_time(r["started_at"] or r["created_at"]),
                _duration(r),
                r["iterations"],
                f"{(r['prompt_tokens'] or 0) + (r['completion_tokens'] or 0)}",
                f"{r['cost_usd'] or 0:.4f}",
                _delivery(r),
            ]
            for r in rows
        ],
        ["RUN", "JOB", "TRIGGER", "STATUS", "REASON", "STARTED", "TOOK", "TURNS", "TOKENS", "COST$", "DELIVERY"],
    )


def _with_approval(store: Any, row: dict[str, Any]) -> dict[str, Any]:
    """A ``waiting`` run's JSON also names what it waits for (``waiting_for``: the approval)."""
    if row["status"] != RunStatus.WAITING:
        return row
    from runner.store.control import waiting_on

    request = waiting_on(store, row["id"])
    if request is None:
        return row
    return {**row, "waiting_for": {"approval_id": request.id, "command": request.command, "expires_at": request.expires_at}}


def _delivery(row: dict[str, Any]) -> str:
    """``ok``, ``FAILED`` (some sink failed after its retries) or ``-`` (nothing was delivered)."""
    if row.get("delivery_failed"):
        return "FAILED"
    return "ok" if row.get("delivery") else "-"


MAX_ID_CHARS = 64
MIN_PART_CHARS = 4


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def find_run(store: Any, run_id: str) -> dict[str, Any]:
    """The run whose id is ``run_id``, else the one run whose id starts with it, else the one run
    whose id contains it (at least 4 characters; ``%`` and ``_`` are plain characters)."""
    from runner.errors import UsageError
    from runner.store.runs import run_with_id, runs_with_id_like

    text = run_id.strip()
    if not text or len(text) > MAX_ID_CHARS:
        raise UsageError(f"{_shown(run_id)} is not a run id (see: runner runs list)")
    row = run_with_id(store, text)
    if row is not None:
        return dict(row)
    if len(text) >= MIN_PART_CHARS:
        for pattern in (f"{_like_escape(text)}%", f"%{_like_escape(text)}%"):
            rows = runs_with_id_like(store, pattern, 6)
            if len(rows) == 1:
                return dict(rows[0])
            if rows:
                shown = ", ".join(r["id"] for r in rows[:5])
                raise UsageError(f"run id {text!r} is ambiguous: {shown}{', ...' if len(rows) > 5 else ''}")
    raise UsageError(f"no run {_shown(text)} (see: runner runs list)")


def _shown(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:40] + "...")


def _load(run_id: str) -> dict[str, Any]:
    return find_run(settings().store, run_id)


def format_event(ev: Recorded, *, width: int = 400) -> str:
    return f"{local_time(ev.ts)[11:]}  {ev.shown().text(width)}"


@runs_group.command("show")
@click.argument("run_id", shell_complete=run_ids)
@click.option("--json", "as_json", is_flag=True)
def runs_show(run_id: str, as_json: bool) -> None:
    """Show a run: summary, its subagents, then each step (model turns, tool calls and results, tokens, cost)."""
    from runner.store.runs import children, events

    row = _load(run_id)
    evs = events(settings().store, row["id"])
    kids = children(settings().store, row["id"])
    if as_json:
        echo_json(
            {
                "run": run_json(row),
                "children": [run_json(k) for k in kids],
                "events": [e.as_json() for e in evs],
            }
        )
        return
    click.echo(f"run      {row['id']}")
    if row.get("parent_run_id"):
        click.echo(f"parent   {row['parent_run_id']}  (a subagent started by delegate_task)")
    click.echo(f"job      {row['job']}  (trigger: {row['trigger']}{', slot ' + row['slot'] if row['slot'] else ''})")
    _style.echo(f"status   {_style.status(row['status'])}{'  reason: ' + row['reason'] if row['reason'] else ''}")
    if row["error"]:
        click.echo(f"error    {row['error']}")
    _waiting(row)
    click.echo(f"started  {local_time(row['started_at'])}   took {_duration(row)}")
    if row.get("dispatched_at") and row.get("started_at"):
        click.echo(f"queue    {_queue(row)}")
    click.echo(
        f"model    {row['model'] or '-'}   turns {row['iterations']}   tokens "
        f"{row['prompt_tokens']}+{row['completion_tokens']}{_cached(row)}   cost ${row['cost_usd'] or 0:.5f}"
        f"{cached_share(row['prompt_tokens'], row.get('cached_tokens'))}"
    )
    if row["output_path"]:
        click.echo(f"output   {row['output_path']}")
    _partial_answer(row)
    if row["delivery"]:
        from runner.config.sinks import mask_sink_label

        sinks = json.loads(row["delivery"])
        click.echo(
            "delivery "
            + ", ".join(f"{mask_sink_label(d['sink'])}={'ok' if d['ok'] else 'FAILED ' + d['detail']}" for d in sinks)
        )
    _checkpoints(row["id"], evs)
    _children(kids, evs)
    click.echo("")
    click.echo("steps:")
    for ev in evs:
        if ev.kind not in LIVE_ONLY:
            click.echo(format_event(ev))


def _checkpoints(run_id: str, evs: list[Recorded]) -> None:
    """How many workdir checkpoints the run took, and failed to take (a failure is not the run's)."""
    from runner.events import Checkpoint, CheckpointFailed

    taken = sum(1 for e in evs if isinstance(e.payload, Checkpoint))
    failed = sum(1 for e in evs if isinstance(e.payload, CheckpointFailed))
    if taken or failed:
        note = f", {failed} FAILED (see the steps)" if failed else ""
        click.echo(f"checkpoints {taken}{note}   runner runs checkpoints {run_id}")


def _waiting(row: dict[str, Any]) -> None:
    """A run waiting on an approval says what for, with the commands that answer it (and its
    dashboard page when config.yaml's ``web.url`` is set)."""
    if row["status"] != RunStatus.WAITING:
        return
    from runner.store.control import waiting_on

    request = waiting_on(settings().store, row["id"])
    if request is not None:
        click.echo(
            f"waiting  for approval {request.id} until {local_time(request.expires_at)}: {request.command[:120]}\n"
            f"         runner approvals grant {request.id}  |  runner approvals deny {request.id} --reason TEXT"
        )
        url = settings().config.web.url
        if url:
            click.echo(f"         or answer at {url.rstrip('/')}/runs/{row['id']}")


@runs_group.command("cancel")
@click.argument("run_id", shell_complete=run_ids)
def runs_cancel(run_id: str) -> None:
    """Stop run RUN_ID now: its current step is cut (a command gets SIGTERM, then SIGKILL after
    serve.kill_grace; a model request or MCP call is given up) and it ends interrupted (reason
    cancelled), whoever runs it; a run waiting on an approval stops waiting. Exit 2 when the run
    is unknown or not running."""
    from runner.store.control import request_cancel, whoami

    store = settings().store
    row = find_run(store, run_id)
    request_cancel(store, row["id"], by=whoami())
    click.echo(f"cancel requested for run {row['id']} ({row['job']}): its current step is cut, it ends interrupted")


@runs_group.command("say")
@click.argument("run_id", shell_complete=run_ids)
@click.argument("message")
def runs_say(run_id: str, message: str) -> None:
    """Send run RUN_ID a message: the model gets it as a user message before its next request
    (after the current step; a run waiting on an approval gets it after the answer), and the run
    records it as a step. At most 4,000 characters. Exit 2 when the run is unknown, not running or a
    subagent (send it to the parent run), or the message is empty or too long."""
    from runner.store.control import request_steer, whoami

    store = settings().store
    row = find_run(store, run_id)
    request_steer(store, row["id"], message, by=whoami())
    click.echo(f"message queued for run {row['id']} ({row['job']}): the model gets it before its next request")


@runs_group.command("resume")
@click.argument("run_id", shell_complete=run_ids)
@click.option("--json", "as_json", is_flag=True, help="print the new attempt's summary as JSON")
def runs_resume(run_id: str, as_json: bool) -> None:
    """Resume run RUN_ID in this process from its journal of completed steps: a new attempt of the
    same run (one more ``attempt``) replays the model turns and tool results journaled and goes on
    from the first step that has none; a call the lost worker was running is not run again (the
    model is told its outcome is unknown). Only the last attempt of a run that ended
    failed/worker_died, failed/worker_lost, unknown or interrupted; exit 2 otherwise, and from
    inside a run. Exits with the new attempt's status, as run-job does."""
    import sys
    import threading

    from runner.errors import UsageError
    from runner.host.procs import two_stage_stop
    from runner.run.execute import execute
    from runner.run.request import RunRequest
    from runner.safety.approval import has_tty
    from runner.safety.inside import refuse_inside_run
    from runner.statuses import Trigger
    from runner.store import ledger
    from runner.store.control import trigger_vars_of
    from runner.store.journal import attempts, resumable

    refuse_inside_run("resume a run")
    s = settings()
    row = ledger.get(s.store, find_run(s.store, run_id)["id"])
    assert row is not None
    if row.parent_run_id is not None or row.trigger in (Trigger.KANBAN, Trigger.DELEGATE):
        raise UsageError(f"run {row.id} is a {row.trigger} run: its task or parent run decides what runs again")
    if not resumable(row):
        what = f"{row.status}{f'/{row.reason}' if row.reason else ''}"
        raise UsageError(
            f"run {row.id} ended {what}: only a run that ended failed/worker_died, failed/worker_lost, unknown "
            "or interrupted can be resumed"
        )
    later = [a for a in attempts(s.store, row.parent_run or row.id) if a.attempt > row.attempt]
    if later:
        raise UsageError(f"run {row.id} was resumed or retried already by run {later[-1].id} (attempt {later[-1].attempt})")
    job = s.jobs.get(row.job)
    stop = threading.Event()
    trigger = Trigger.RETRY if row.trigger in (Trigger.SCHEDULE, Trigger.RETRY) else row.trigger
    req = RunRequest(
        job=job,
        trigger=trigger,
        vars_override=dict(trigger_vars_of(s.store, row.parent_run or row.id)),  # a trigger's --var
        stdout=sys.stderr if as_json else sys.stdout,
        stop=stop,
        interactive=has_tty(),
        resumes=row.id,
    )
    with two_stage_stop(stop):
        outcome = execute(s, req)
    if as_json:
        echo_json(outcome.as_dict())
    else:
        from runner.cli.run import prerun_stdout, summary_line

        line = summary_line(outcome, prerun_stdout)
        head = f"run {outcome.run_id}"
        _style.echo(line.replace(head, f"{head} (attempt {row.attempt + 1} of run {row.parent_run or row.id})", 1), err=True)
    sys.exit(outcome.exit_code)


def _cached(row: dict[str, Any]) -> str:
    cached = row.get("cached_tokens") or 0
    return f" ({cached} cached)" if cached else ""


def _children(kids: list[dict[str, Any]], evs: list[Recorded]) -> None:
    """The run's subagents, nested under it: status, turns, tokens, cost and goal of each
    (the run's own totals above include theirs)."""
    if not kids:
        return
    goals = {ev.payload.run_id: ev.payload.goal for ev in evs if isinstance(ev.payload, SubagentStarted)}
    click.echo("")
    click.echo(f"subagents ({len(kids)}; their tokens and cost are included above):")
    for k in kids:
        reason = f" ({k['reason']})" if k["reason"] and k["status"] != RunStatus.SUCCEEDED else ""
        _style.echo(
            f"  {k['id']}  {_style.status(k['status'])}{reason}  turns {k['iterations']}  tokens "
            f"{k['prompt_tokens']}+{k['completion_tokens']}  ${k['cost_usd'] or 0:.5f}  took {_duration(k)}"
        )
        if goals.get(k["id"]):
            click.echo(f"      goal: {clip(goals[k['id']], 160)}")


def _partial_answer(row: dict[str, Any]) -> None:
    """A run stopped by a limit: print the report its grace call gave (its output file)."""
    if row["status"] in (RunStatus.SUCCEEDED, *ACTIVE) or not row["output_path"]:
        return
    from runner.store.files import FileKind, read

    try:
        text = read(settings().store, row["id"], FileKind.OUTPUT, row["output_path"])
    except OSError as exc:
        click.echo(f"partial answer: cannot read {row['output_path']}: {exc.strerror}")
        return
    if len(text) > PARTIAL_CHARS:
        text = text[:PARTIAL_CHARS] + f"\n[... {len(text) - PARTIAL_CHARS} more characters in the output file]"
    click.echo("")
    click.echo("partial answer:")
    click.echo(textwrap.indent(text.rstrip("\n"), "  "))


@runs_group.command("logs")
@click.argument("run_id", shell_complete=run_ids)
@click.option("--follow", "-f", is_flag=True, help="keep printing new events until the run ends")
@click.option("--json", "as_json", is_flag=True, help="JSON lines")
def runs_logs(run_id: str, follow: bool, as_json: bool) -> None:
    """Print a run's events as they arrive."""
    from runner.store.runs import events, get_run

    store = settings().store
    row = _load(run_id)
    seq = 0
    while True:
        for ev in events(store, row["id"], after=seq):
            seq = ev.seq
            click.echo(json.dumps(ev.as_json(), ensure_ascii=False) if as_json else format_event(ev))
        if not follow:
            return
        current = get_run(store, row["id"])
        if current is None or current["status"] not in ACTIVE:
            for ev in events(store, row["id"], after=seq):
                click.echo(json.dumps(ev.as_json(), ensure_ascii=False) if as_json else format_event(ev))
            return
        time.sleep(0.3)


@runs_group.command("search")
@click.argument("query")
@click.option("--job", help="only runs of this job", shell_complete=job_names)
@click.option("--since", metavar="7d|DATE", help="only text written since: a duration back from now, or a date")
@click.option("--limit", default=10, show_default=True, type=click.IntRange(1, 50), help="how many runs")
@click.option("--raw", is_flag=True, help='QUERY is SQLite FTS5 syntax (OR, NOT, NEAR, "phrases", prefix*)')
@click.option("--json", "as_json", is_flag=True)
def runs_search(query: str, job: str | None, since: str | None, limit: int, raw: bool, as_json: bool) -> None:
    """Full-text search over past runs: prompts, the model's answers, tool calls and results, pre_run
    output and final outputs (all redacted). One passage per run, best and newest first (relevance
    discounted by age: a match 30 days older counts half). Every word must occur; a trailing *
    matches a prefix. A query FTS5 rejects (with --raw) is a one-line error, exit 2. The index is
    kept as runs write events; `runner db reindex` rebuilds it."""
    from runner.store.search import Search, search
    from runner.store.search import since as since_time

    q = Search(query, job=job, since=since_time(since) if since else None, limit=limit, raw=raw)
    hits = search(settings().store, q)
    if as_json:
        echo_json([h.as_dict() for h in hits])
        return
    if not hits:
        click.echo("no matches")
        return
    for h in hits:
        what = f"{h.kind} ({h.label})" if h.label else h.kind
        click.echo(f"{h.run_id}  {h.job}  {local_time(h.ts)}  {what}")
        click.echo(f"    {h.snippet}")

from runner.cli._checkpoints import runs_checkpoints, runs_rollback  # noqa: E402 - in their own module
from runner.cli._prune import runs_prune  # noqa: E402 - `runs prune` lives in its own module

runs_group.add_command(runs_prune)
runs_group.add_command(runs_checkpoints)
runs_group.add_command(runs_rollback)

COMMANDS = [runs_group]
