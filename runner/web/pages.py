"""The dashboard's pages (GET): each reads through ``runner.store.queries`` (or the module the CLI
uses for the same listing) and renders one template."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from runner.agent.credentials import list_credentials, sync_config
from runner.clock import utcnow
from runner.config.schedules import format_duration
from runner.events import LIVE_ONLY, Checkpoint, Recorded, Shown, cached_share
from runner.run.budget import report
from runner.serve.planner import JobState, upcoming
from runner.serve.state import load_states, serve_status
from runner.statuses import ACTIVE, RunStatus, TaskStatus
from runner.store import followups, queries
from runner.store.board import Board
from runner.store.control import STEER_MAX_CHARS
from runner.store.lease import lease_holder
from runner.store.reloads import refused_reload
from runner.store.tasks import TaskNotFound
from runner.web import charts as c
from runner.web import skills as skill_rows
from runner.web import trace
from runner.web.markdown import render

BOARD_COLUMNS = [s for s in TaskStatus if s != TaskStatus.ARCHIVED]
CURATOR_REPORT_CHARS = 200_000
REFRESH_S = 10  # the overview and the newest page of runs re-fetch themselves this often (htmx)


def _web(request: Request) -> Any:
    return request.app.state.web


def _ago(text: str | None) -> str:
    if not text:
        return ""

    seconds = (datetime.now(UTC) - datetime.fromisoformat(text)).total_seconds()
    return f"{format_duration(abs(seconds))} {'ago' if seconds >= 0 else 'from now'}"


def _short(value: Any, width: int = 2000) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 3] + "..."


def install_filters(env: Any, redactor: Any) -> None:
    env.filters["ago"] = _ago
    env.filters["short"] = _short
    env.filters["redact"] = lambda text: redactor(str(text)) if text is not None else ""
    env.filters["markdown"] = lambda text: render(redactor(text or ""))
    env.filters["usd"] = lambda v: f"${(v or 0):,.4f}"
    env.filters["duration"] = lambda row: "" if (d := queries.duration_s(row)) is None else f"{d:.1f}s"
    env.filters["time"] = lambda t: (t or "")[:19].replace("T", " ")
    env.filters["took"] = trace.duration
    env.globals["kinds"] = trace.KINDS
    env.globals["cached_share"] = cached_share
    env.globals["full_chars"] = trace.FULL_CHARS
    env.globals["ACTIVE"] = [str(s) for s in ACTIVE]
    env.globals["REFRESH_S"] = REFRESH_S
    env.globals["STATUSES"] = [s.value for s in RunStatus]
    env.globals["TASK_STATUSES"] = [s.value for s in TaskStatus if s != TaskStatus.RUNNING]


# -- overview and jobs ------------------------------------------------------------------------
def _next_fires(source: Any, now: datetime, count: int = 1) -> dict[str, list[str]]:
    jf = source.jobs().value
    if jf is None:
        return {}
    states = load_states(source.store)
    out: dict[str, list[str]] = {}
    for name, job in jf.jobs.items():
        state = states.get(name)
        if job.schedule_obj is None or not job.spec.enabled or (state is not None and state.paused):
            out[name] = []
            continue
        fires = upcoming(job, state or JobState(job=name), now, count)
        out[name] = [f.astimezone(UTC).isoformat(timespec="seconds") for f in fires]
    return out


def overview(request: Request) -> Response:
    w = _web(request)
    store, now = w.source.store, utcnow()
    lead = lease_holder(store)
    pending = followups.pending(store)  # runs asked for by runs (schedule_followup), soonest first
    fires = sorted(((f[0], job) for job, f in _next_fires(w.source, now).items() if f))[:10]
    budget = report(store, w.source.config())
    return w.render(
        request,
        "overview.html",
        active=queries.active_runs(store),
        waiting=queries.waiting_runs(store),
        failures=queries.recent_failures(store, now),
        fires=fires,
        followups=pending,
        budget=[b for b in budget["scopes"] if b["today"]["cap_usd"] is not None or b["today"]["spent_usd"]],
        budget_day=budget["day"],
        serve=serve_status(store, now),
        leader=lead if lead is not None and lead.live(now) else None,  # the serve holding the scheduler lease
        jobs_error=w.source.jobs().error,
        refused=refused_reload(store),  # the last reload serve refused, until one is applied
    )


def jobs(request: Request) -> Response:
    w = _web(request)
    loaded = w.source.jobs()
    names = sorted(loaded.value.jobs) if loaded.value is not None else []
    now = utcnow()
    return w.render(
        request,
        "jobs.html",
        jobs=[loaded.value.jobs[n] for n in names],
        states=load_states(w.source.store),
        fires=_next_fires(w.source, now, 3),
        strips=queries.strips(w.source.store, names),
        followups=followups.pending(w.source.store),  # the same listing as runner jobs followups list
        jobs_error=loaded.error,
    )


def job_detail(request: Request) -> Response:
    """``/jobs/NAME``: the job's definition, prompt, schedule, chain, follow-ups, runs and spend."""
    from runner.web import jobpage

    w = _web(request)
    name = request.path_params["name"]
    loaded = w.source.jobs()
    if loaded.value is None or name not in loaded.value.jobs:
        what = f"job {name}" + (f" (jobs.yaml does not load: {loaded.error})" if loaded.error else "")
        return w.render(request, "missing.html", status_code=404, what=what)
    job = loaded.value.jobs[name]
    state = load_states(w.source.store).get(name)
    ctx = jobpage.context(w.source.store, loaded.value, job, state, utcnow(), w.redactor)
    return w.render(request, "job.html", **ctx)


# -- runs -------------------------------------------------------------------------------------
def runs(request: Request) -> Response:
    w = _web(request)
    q = request.query_params
    flt = queries.RunFilter(
        job=q.get("job") or None,
        status=q.get("status") or None,
        since=q.get("since") or None,
        until=q.get("until") or None,
    )
    page = queries.runs_page(w.source.store, flt, before=q.get("before") or None, after=q.get("after") or None)
    return w.render(request, "runs.html", page=page, flt=flt, query=flt.query())


def _output(run: dict[str, Any]) -> str | None:
    if not run.get("output_path"):
        return None
    try:
        return Path(run["output_path"]).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def run_detail(request: Request) -> Response:
    w = _web(request)
    detail = queries.run_detail(w.source.store, request.path_params["run_id"])
    if detail is None:
        return w.render(request, "missing.html", status_code=404, what=f"run {request.path_params['run_id']}")
    last_seq = detail.events[-1].seq if detail.events else 0
    live = detail.run["status"] in ACTIVE
    output = None if live else _output(detail.run)
    steps = _steps(detail.events)
    points = [] if live else _checkpoints(w.source.home, detail.events)
    tl = run_timeline(detail.run, detail.events, live, points)
    carried = {s.diff.checkpoint: s.seq for s in tl.steps if s.diff is not None}  # checkpoint -> its step
    waiting = None  # the approval a waiting run is parked on (the banner with Approve / Deny)
    if detail.run["status"] == RunStatus.WAITING:
        waiting = next((r for r in queries.waiting_runs(w.source.store) if r.run_id == detail.run["id"]), None)
    return w.render(
        request,
        "run.html",
        d=detail,
        run=detail.run,
        output=output,
        live=live,
        last_seq=last_seq,
        steps=steps,
        tl=tl,
        rows=tl.steps,
        carried=carried,
        checkpoints=points,
        steer_max=STEER_MAX_CHARS,
        waiting=waiting,
    )


def run_timeline(
    run: dict[str, Any], events: list[Recorded], live: bool, points: list[tuple[Any, str, bool]] | None = None
) -> trace.Timeline:
    """The run's waterfall; each checkpoint's diff goes to the step that followed it."""
    seq_of = {e.payload.id: e.seq for e in events if isinstance(e.payload, Checkpoint)}
    diffs = {seq_of[p.id]: trace.Diff(p.id, text, cut) for p, text, cut in points or [] if text and p.id in seq_of}
    started = run.get("started_at") or run.get("created_at")
    return trace.timeline(events, started_at=started, ended_at=run.get("ended_at"), now=utcnow(), live=live, diffs=diffs)


def timeline_html(w: Any, tl: trace.Timeline, rows: Any) -> str:
    """Rows of the waterfall (the run page and its live stream render the same HTML)."""
    return str(w.env.get_template("_timeline.html").render(tl=tl, rows=rows))


MAX_DIFFS = 50  # checkpoints of one run shown with their diff
DIFF_BYTES = 100_000  # of one diff


def _checkpoints(home: Path, events: list[Recorded]) -> list[tuple[Any, str, bool]]:
    """Each checkpoint of an ended run with the diff to the next one (what the turns after it
    changed; read-only ``git diff`` in the shadow repository), or why there is none."""
    from runner.errors import CheckpointError
    from runner.run.checkpoints import listed
    from runner.run.shadow import Shadow

    points = listed(events)[:MAX_DIFFS]
    out: list[tuple[Any, str, bool]] = []
    for here, after in zip(points, [*points[1:], None], strict=False):
        if after is None:
            out.append((here, "", False))
            continue
        try:
            text, cut = Shadow(home, Path(here.workdir)).diff(here.id, after.id, DIFF_BYTES)
        except CheckpointError as exc:
            text, cut = f"(no diff: {exc})", False
        out.append((here, text, cut))
    return out


def step_html(w: Any, events: list[Recorded]) -> str:
    """The timeline rows of ``events`` (the run page and its live stream render the same HTML)."""
    return str(w.env.get_template("_steps.html").render(steps=_steps(events)))


def _steps(events: list[Recorded]) -> list[tuple[Recorded, Shown]]:
    return [(e, e.shown()) for e in events if e.kind not in LIVE_ONLY]


# -- the board --------------------------------------------------------------------------------
def _columns(w: Any) -> dict[str, list[Any]]:
    tasks = Board(w.source.store).tasks()
    return {str(s): [t for t in tasks if t.status == s] for s in BOARD_COLUMNS}


def board(request: Request) -> Response:
    w = _web(request)
    loaded = w.source.jobs()
    jobs = sorted(loaded.value.jobs) if loaded.value is not None else []
    default_job = w.source.config().kanban.default_job
    return w.render(request, "board.html", columns=_columns(w), jobs=jobs, default_job=default_job)


def board_columns(request: Request) -> Response:
    w = _web(request)
    return w.render(request, "_columns.html", columns=_columns(w))


def task_detail(request: Request) -> Response:
    w = _web(request)
    b = Board(w.source.store)
    task_id = int(request.path_params["task_id"])
    try:
        task = b.get(task_id)
    except TaskNotFound:
        return w.render(request, "missing.html", status_code=404, what=f"task {task_id}")
    return w.render(
        request,
        "task.html",
        t=task,
        parents=b.parents(task_id),
        children=b.children(task_id),
        comments=b.comments(task_id),
        events=b.events(task_id),
        runs=b.runs(task_id),
    )


# -- approvals, credentials, skills, charts ---------------------------------------------------
def _pending(store: Any) -> tuple[list[Any] | None, str | None]:
    try:
        from runner.store.control import pending_approvals
    except ImportError:
        return None, "parked approvals need runner.store.control (not in this build)"
    return list(pending_approvals(store)), None


def approvals(request: Request) -> Response:
    w = _web(request)
    before = request.query_params.get("before")
    rows = queries.approvals_audit(w.source.store, before=int(before) if before and before.isdigit() else None)
    pending, pending_note = _pending(w.source.store)
    older = rows[-1]["id"] if len(rows) == queries.PAGE_SIZE else None
    return w.render(request, "approvals.html", rows=rows, pending=pending, pending_note=pending_note, older=older)


def credentials(request: Request) -> Response:
    w = _web(request)
    sync_config(w.source.store, w.source.config())
    return w.render(request, "credentials.html", keys=list_credentials(w.source.store))


def skills(request: Request) -> Response:
    w = _web(request)
    return w.render(request, "skills.html", skills=skill_rows.rows(w.source), passes=queries.curator_runs(w.source.store))


def curator_report(request: Request) -> Response:
    w = _web(request)
    row = w.source.store.one("SELECT * FROM curator_runs WHERE id = ?", (request.path_params["pass_id"],))
    if row is None:
        return w.render(request, "missing.html", status_code=404, what="curator pass")
    text = None
    if row.get("report_path"):
        try:
            text = Path(row["report_path"]).read_text(encoding="utf-8", errors="replace")[:CURATOR_REPORT_CHARS]
        except OSError:
            text = None
    return w.render(request, "curator.html", p=row, report=text)


def charts(request: Request) -> Response:
    w = _web(request)
    now = utcnow()
    rows = c.daily(w.source.store, now)
    axis = c.day_axis(now)
    jobs = sorted({r.job for r in rows})
    fleet = [
        (title, c.bars(c.series(rows, axis, None, metric), axis, title=title, unit=unit))
        for title, metric, unit in (
            ("Cost per day, all jobs", "cost", c.USD),
            ("Tokens per day, all jobs", "tokens", ""),
            ("Mean run duration per day", "duration", " s"),
            ("Failure rate per day", "failure_rate", " %"),
        )
    ]
    per_job = [
        (
            job,
            c.bars(c.series(rows, axis, job, "cost"), axis, title=f"{job}: cost per day", unit=c.USD),
            c.bars(c.series(rows, axis, job, "tokens"), axis, title=f"{job}: tokens per day"),
        )
        for job in jobs
    ]
    by_status = c.stacked(
        c.status_series(c.statuses(w.source.store, now), axis),
        [cls for cls, _, _ in c.STATUS_GROUPS],
        [name for _, name, _ in c.STATUS_GROUPS],
        axis,
        title="Runs per day by status",
    )
    legend = [(cls, name) for cls, name, _ in c.STATUS_GROUPS]
    return w.render(
        request, "charts.html", fleet=fleet, per_job=per_job, days=len(axis), by_status=by_status, legend=legend
    )
