"""``runner jobs list | validate | next``."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Any

import click

from runner.cli._util import echo_json, settings, table


@click.group("jobs")
def jobs_group() -> None:
    """Inspect and check jobs.yaml."""


def _backend_label(spec: Any) -> str:
    if spec.type == "docker":
        return f"docker:{spec.image}"
    if spec.type == "ssh":
        return f"ssh:{spec.host}"
    return "local"


def _next_fire(job: Any, now: datetime) -> str | None:
    sched = job.schedule_obj
    if sched is None or not job.spec.enabled:
        return None
    nxt = sched.next_fire(None, now)
    return nxt.astimezone(UTC).isoformat(timespec="seconds") if nxt else None


@jobs_group.command("list")
@click.option("--json", "as_json", is_flag=True)
def jobs_list(as_json: bool) -> None:
    """List jobs: schedule, next fire, backend, enabled, last status."""
    s = settings()
    jf = s.jobs
    now = datetime.now(UTC)
    last: dict[str, dict[str, Any]] = {}
    if (s.home / "runner.db").exists():
        for row in s.store.query(
            "SELECT job, status, created_at FROM runs r WHERE created_at = "
            "(SELECT MAX(created_at) FROM runs WHERE job = r.job)"
        ):
            last[row["job"]] = row
    rows = []
    for name, job in sorted(jf.jobs.items()):
        rows.append(
            {
                "name": name,
                "schedule": job.spec.schedule,
                "timezone": job.tz_name,
                "next_fire": _next_fire(job, now),
                "backend": _backend_label(job.spec.backend),
                "enabled": job.spec.enabled,
                "last_status": (last.get(name) or {}).get("status"),
                "description": job.spec.description,
            }
        )
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo(f"no jobs in {jf.path}")
        return
    table(
        [
            [
                r["name"],
                r["schedule"] or "(manual)",
                r["next_fire"] or "-",
                r["backend"],
                "yes" if r["enabled"] else "no",
                r["last_status"] or "-",
            ]
            for r in rows
        ],
        ["NAME", "SCHEDULE", "NEXT FIRE (UTC)", "BACKEND", "ENABLED", "LAST"],
    )


@jobs_group.command("validate")
@click.option("--json", "as_json", is_flag=True)
def jobs_validate(as_json: bool) -> None:
    """Check jobs.yaml (and its templates); print every problem; exit 2 if there are any."""
    from runner.errors import ConfigError, TemplateError
    from runner.prompt import check_syntax

    s = settings()
    problems: list[str] = []
    try:
        jf = s.jobs
    except ConfigError as exc:
        problems = exc.problems
        jf = None
    if jf is not None:
        for job in jf.jobs.values():
            if job.spec.agent:
                try:
                    check_syntax(job)
                except TemplateError as exc:
                    problems.append(f"{jf.path}: job {job.name}: prompt: {exc}")
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
@click.argument("name")
@click.option("-n", "count", default=5, show_default=True, type=click.IntRange(1, 1000))
@click.option("--json", "as_json", is_flag=True)
def jobs_next(name: str, count: int, as_json: bool) -> None:
    """Print the next fire times of job NAME, in its timezone and in UTC."""
    from zoneinfo import ZoneInfo

    from runner.errors import UsageError

    s = settings()
    job = s.jobs.get(name)
    if job.schedule_obj is None:
        raise UsageError(f"job {name} has no schedule (manual only)")
    tz = ZoneInfo(job.tz_name)
    now = datetime.now(UTC)
    fires: list[datetime] = []
    prev = None
    while len(fires) < count:
        nxt = job.schedule_obj.next_fire(prev, now)
        if nxt is None:
            break
        fires.append(nxt)
        prev = nxt
    rows = [{"local": f.astimezone(tz).isoformat(), "utc": f.astimezone(UTC).isoformat()} for f in fires]
    if as_json:
        echo_json(rows)
        return
    for r in rows:
        click.echo(f"{r['local']}  ({r['utc']} UTC)")
    if not rows:
        click.echo("no future fires")


COMMANDS = [jobs_group]
