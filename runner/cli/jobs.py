"""``runner jobs list | validate | next | pause | resume | trigger | followups``."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from runner.cli._complete import job_names
from runner.cli._util import echo_json, parse_vars, settings, table

if TYPE_CHECKING:
    from runner.store.queries import LastRun


@click.group("jobs")
def jobs_group() -> None:
    """Inspect and check jobs.yaml."""


def _backend_label(spec: Any) -> str:
    if spec.type == "docker":
        return f"docker:{spec.image}"
    if spec.type == "ssh":
        return f"ssh:{spec.host}"
    return "local"


def _states(s: Any) -> dict[str, Any]:
    """Scheduler state from the store (none yet when runner.db does not exist)."""
    if not s.has_store():
        return {}
    from runner.serve.state import load_states

    return load_states(s.store)


def _next_fire(job: Any, state: Any, now: datetime) -> str | None:
    from runner.serve.planner import JobState, upcoming

    if job.schedule_obj is None or not job.spec.enabled or (state is not None and state.paused):
        return None
    fires = upcoming(job, state or JobState(job=job.name), now, 1)
    return fires[0].astimezone(UTC).isoformat(timespec="seconds") if fires else None


@jobs_group.command("list")
@click.option("--json", "as_json", is_flag=True)
def jobs_list(as_json: bool) -> None:
    """List jobs: schedule, next fire, backend, enabled/paused, last status; and whether serve runs."""
    from runner.config import listing

    s = settings()
    listed: list[Any] | None = None
    if s.jobs_path.exists():
        listed = listing.load(s.home, s.jobs_path, s.config_path)
    if listed is None:
        jf = s.jobs  # full validation: errors are reported here
        labels = {name: _backend_label(job.spec.backend) for name, job in jf.jobs.items()}
        listed = list(jf.jobs.values())
        listing.save(s.ensure_home(), s.jobs_path, s.config_path, listed, labels)
    else:
        labels = {job.name: job.spec.backend_label for job in listed}
    now = datetime.now(UTC)
    last: dict[str, LastRun] = {}  # each job's newest run
    states = _states(s)
    serve_line, serve_alive = "serve: never started on this RUNNER_HOME", False
    leader: str | None = None  # the host and pid of the serve holding the scheduler lease
    leader_since: str | None = None  # when it took the lease
    if s.has_store():
        from runner.serve.state import serve_status
        from runner.store.queries import last_runs

        last = last_runs(s.store)
        from runner.store.lease import lease_holder

        status = serve_status(s.store, now)
        serve_line, serve_alive = status.describe(now), status.alive
        lead = lease_holder(s.store)
        if lead is not None:
            serve_line += f"; {lead.describe(now)}"
            if lead.live(now):
                leader, leader_since = f"{lead.host} (pid {lead.pid})", lead.acquired_at
    rows = []
    for job in sorted(listed, key=lambda j: j.name):
        name = job.name
        state = states.get(name)
        rows.append(
            {
                "name": name,
                "schedule": job.spec.schedule,
                "timezone": job.tz_name,
                "next_fire": _next_fire(job, state, now),
                "backend": labels[name],
                "enabled": job.spec.enabled,
                "paused": bool(state and state.paused),
                "paused_reason": state.paused_reason if state else None,
                "failure_streak": state.failure_streak if state else 0,
                "last_status": last[name].status if name in last else None,
                "last_delivery_failed": name in last and last[name].delivery_failed,
                "description": job.spec.description,
                "started_by": job.spec.chain if isinstance(job.spec, listing.ListedSpec) else listing.chain_label(job.spec),
                "serve_alive": serve_alive,
                "leader": leader,
                "leader_since": leader_since,
            }
        )
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo(f"no jobs in {s.jobs_path}")
        click.echo(serve_line)
        return
    table(
        [
            [
                r["name"],
                r["schedule"] or "(manual)",
                r["next_fire"] or "-",
                r["backend"],
                "paused" if r["paused"] else ("yes" if r["enabled"] else "no"),
                (r["last_status"] or "-") + (" (delivery FAILED)" if r["last_delivery_failed"] else ""),
            ]
            for r in rows
        ],
        ["NAME", "SCHEDULE", "NEXT FIRE (UTC)", "BACKEND", "ENABLED", "LAST"],
    )
    for r in rows:
        if r["started_by"]:
            click.echo(f"{r['name']}: started by {r['started_by']}")
    for r in rows:
        if r["paused"]:
            click.echo(f"{r['name']}: {r['paused_reason'] or 'paused'} (runner jobs resume {r['name']})")
    click.echo(serve_line)


@jobs_group.command("validate")
@click.option("--json", "as_json", is_flag=True)
def jobs_validate(as_json: bool) -> None:
    """Check jobs.yaml, its templates (undefined variables, read statically), models, pre_run
    scripts, skills and one-shot times; print every problem; exit 2 if there are any."""
    from runner.errors import ConfigError
    from runner.run.checks import check_jobs

    s = settings()
    problems: list[str] = []
    try:
        jf = s.jobs
    except ConfigError as exc:
        from runner.run.checks import tool_file_problems

        problems = [*exc.problems, *tool_file_problems(s)]
        jf = None
    if jf is not None:
        problems.extend(check_jobs(jf, s, now=datetime.now(UTC)))
    if as_json:
        echo_json({"ok": not problems, "problems": problems, "jobs": sorted(jf.jobs) if jf and not problems else []})
    elif problems:
        for p in problems:
            click.echo(p, err=True)
    else:
        click.echo(f"{s.jobs_path}: {len(jf.jobs) if jf else 0} jobs, all valid")
    if problems:
        sys.exit(2)


@jobs_group.command("next")
@click.argument("name", shell_complete=job_names)
@click.option("-n", "count", default=5, show_default=True, type=click.IntRange(1, 1000))
@click.option("--json", "as_json", is_flag=True)
def jobs_next(name: str, count: int, as_json: bool) -> None:
    """Print the next fire times of job NAME, in its timezone and in UTC."""
    from zoneinfo import ZoneInfo

    from runner.errors import UsageError

    s = settings()
    job = s.jobs.get(name)
    pending = _pending_followups(s, name)
    if job.schedule_obj is None and not pending:
        raise UsageError(f"job {name} has no schedule (manual only) and no follow-ups")
    from runner.serve.planner import JobState, upcoming

    tz = ZoneInfo(job.tz_name)
    now = datetime.now(UTC)
    fires = upcoming(job, _states(s).get(name) or JobState(job=name), now, count) if job.schedule_obj else []
    rows: list[dict[str, Any]] = [
        {"local": f.astimezone(tz).isoformat(), "utc": f.astimezone(UTC).isoformat(), "kind": "schedule"} for f in fires
    ]
    for f in pending:
        due = datetime.fromisoformat(f.due_at)
        rows.append(
            {"local": due.astimezone(tz).isoformat(), "utc": due.astimezone(UTC).isoformat(), "kind": "followup",
             "followup_id": f.id, "run_id": f.run_id, "note": f.note}
        )  # fmt: skip
    rows.sort(key=lambda r: r["utc"])
    if as_json:
        echo_json(rows)
        return
    for r in rows:
        extra = f"  follow-up {r['followup_id']} (asked by run {r['run_id']}): {r['note'][:60]}" if r["kind"] == "followup" else ""
        click.echo(f"{r['local']}  ({r['utc']} UTC){extra}")
    if not rows:
        click.echo("no future fires")
    if pending:
        click.echo("cancel a follow-up: runner jobs followups cancel ID")


def _pending_followups(s: Any, name: str | None) -> list[Any]:
    if not s.has_store():
        return []
    from runner.store.followups import pending

    return pending(s.store, name)


@jobs_group.group("followups")
def followups_group() -> None:
    """Follow-ups runs asked for (schedule_followup): list and cancel them."""


@followups_group.command("list")
@click.option("--job", help="only this job", shell_complete=job_names)
@click.option("--json", "as_json", is_flag=True)
def followups_list(job: str | None, as_json: bool) -> None:
    """Pending follow-ups, soonest first: id, job, when, the run that asked, its note."""
    s = settings()
    found = _pending_followups(s, job)
    if as_json:
        echo_json([f.as_dict() for f in found])
        return
    if not found:
        click.echo("no pending follow-ups")
        return
    table([[f.id, f.job, f.due_at, f.run_id or "-", f.note[:60]] for f in found], ["FOLLOWUP", "JOB", "DUE (UTC)", "ASKED BY RUN", "NOTE"])


@followups_group.command("cancel")
@click.argument("followup_id")
def followups_cancel(followup_id: str) -> None:
    """Cancel pending follow-up FOLLOWUP_ID (it never fires)."""
    from runner.clock import utcnow
    from runner.errors import UsageError
    from runner.safety.inside import refuse_inside_run
    from runner.store.control import whoami
    from runner.store.followups import FollowupRefused, cancel

    refuse_inside_run("cancel a follow-up")
    try:
        done = cancel(settings().store, followup_id, by=whoami(), now=utcnow())
    except FollowupRefused as exc:
        raise UsageError(str(exc)) from None
    click.echo(f"cancelled follow-up {done.id} of {done.job} (was due {done.due_at})")


@jobs_group.command("pause")
@click.argument("name", shell_complete=job_names)
def jobs_pause(name: str) -> None:
    """Stop firing job NAME until `runner jobs resume NAME` (kept in the store, over jobs.yaml)."""
    from runner.serve.state import set_paused

    s = settings()
    s.jobs.get(name)
    set_paused(s.store, name, True, "paused with runner jobs pause")
    click.echo(f"paused {name}; a running serve stops firing it within a second")


@jobs_group.command("resume")
@click.argument("name", shell_complete=job_names)
def jobs_resume(name: str) -> None:
    """Fire job NAME again (clears a pause and the failure streak); missed slots are not caught up."""
    from runner.serve.state import set_paused

    s = settings()
    job = s.jobs.get(name)
    set_paused(s.store, name, False)
    note = "" if job.spec.enabled else " (note: it has enabled: false in jobs.yaml, so it still will not fire)"
    click.echo(f"resumed {name}{note}")


@jobs_group.command("trigger")
@click.argument("name", shell_complete=job_names)
@click.option(
    "--var", "var_pairs", multiple=True, metavar="KEY=VALUE", help="override a template variable (as run-job's)"
)
@click.option("--json", "as_json", is_flag=True)
def jobs_trigger(name: str, var_pairs: tuple[str, ...], as_json: bool) -> None:
    """Ask the running serve to run job NAME now (trigger manual), through its pool and the job's
    overlap, max_parallel and retries. Written to the store: a serve that is down runs it when it starts.
    --var KEY=VALUE (repeatable) overrides the job's template variable vars.KEY for this run, as
    run-job's does (at most 20, each value up to 4,000 characters)."""
    from runner.serve.daemon import serve_pid
    from runner.store.control import request_trigger, trigger_vars, whoami

    given = trigger_vars(parse_vars(var_pairs))  # bad --var exits 2 before anything is written
    s = settings()
    s.jobs.get(name)  # an unknown job exits 2 here
    request_id = request_trigger(s.store, name, by=whoami(), vars=dict(given))
    pid = serve_pid(s.home)
    if as_json:
        echo_json({"request": request_id, "job": name, "serve_pid": pid})
        return
    where = f"serve (pid {pid}) runs it now" if pid else "serve is not running: it runs when serve starts"
    click.echo(f"trigger {request_id} for {name}: {where}; see: runner runs list --job {name}")


COMMANDS = [jobs_group]
