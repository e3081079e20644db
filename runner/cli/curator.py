"""``runner curator status | run | pause | resume | consolidate | apply``: the Curator that ages agent-written skills."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from runner.cli import _style
from runner.cli._util import echo_json, local_time, settings


@click.group("curator")
def curator_group() -> None:
    """The Curator: makes unused agent-written skills stale, then archives them (never deletes)."""


def _when(dt: datetime | None, now: datetime) -> str:
    if dt is None:
        return "-"
    from runner.config.schedules import format_duration

    secs = (now - dt).total_seconds()
    rel = f"{format_duration(abs(secs))} {'ago' if secs >= 0 else 'from now'}"
    return f"{local_time(dt.isoformat())} ({rel})"


@curator_group.command("status")
@click.option("--json", "as_json", is_flag=True)
def curator_status(as_json: bool) -> None:
    """Last pass, next eligible time, how long nothing has run, recent passes."""
    from runner.clock import utcnow
    from runner.skills.curator import last_runs
    from runner.skills.idle import idle_status

    s = settings()
    now = utcnow()
    st = idle_status(s.store, s.config.curator, now)
    recent = last_runs(s.store)
    idle = st.idle_for(now)
    if as_json:
        echo_json(
            {
                "enabled": st.enabled,
                "paused": st.paused,
                "last_pass_at": st.last_pass_at,
                "seeded": st.seeded,
                "next_eligible_at": st.next_eligible_at,
                "active_runs": st.active_runs,
                "last_run_ended_at": st.last_run_ended_at,
                "idle_seconds": idle.total_seconds() if idle is not None else None,
                "config": s.config.curator.model_dump(),
                "recent_passes": recent,
            }
        )
        return
    from runner.config.schedules import format_duration

    cfg = s.config.curator
    state = "disabled (curator.enabled: false)" if not st.enabled else ("paused" if st.paused else "enabled")
    click.echo(f"curator     {state}")
    last = _when(st.last_pass_at, now) + ("  [first seen by serve; no pass yet]" if st.seeded else "")
    click.echo(f"last pass   {last if st.last_pass_at else 'never'}")
    if st.next_eligible_at is not None:
        click.echo(f"next        {_when(st.next_eligible_at, now)} at the earliest, once idle")
    elif st.enabled and not st.paused:
        click.echo("next        after `runner serve` first sees the curator (it waits a full interval)")
    if st.active_runs:
        click.echo(f"idle for    not idle: {st.active_runs} run(s) queued or running")
    elif idle is not None:
        click.echo(f"idle for    {format_duration(idle.total_seconds())} (needs {cfg.min_idle_hours:g}h)")
    else:
        click.echo("idle for    no run has ended yet")
    click.echo(
        f"rules       every {cfg.interval_hours:g}h; stale after {cfg.stale_after_days:g} days, "
        f"archived after {cfg.archive_after_days:g} days"
    )
    for row in recent:
        _style.echo(
            f"pass        {row['id']}  {row['trigger']:<6} {_style.status(row['status'], pad=9)} {row['examined']} examined, "
            f"{row['stale']} stale, {row['archived']} archived, {row['reactivated']} reactivated"
        )


@curator_group.command("run")
@click.option("--dry-run", is_flag=True, help="print what would change; change nothing")
@click.option("--json", "as_json", is_flag=True)
def curator_run(dry_run: bool, as_json: bool) -> None:
    """Run a curator pass now (also when paused); --dry-run only reports."""
    from runner.clock import utcnow
    from runner.skills.curator import run_pass

    s = settings()
    result = run_pass(s, now=utcnow(), dry_run=dry_run, trigger="manual", model=_model(s))
    if as_json:
        echo_json(
            {
                "dry_run": result.dry_run,
                "id": result.run_id,  # the pass's id (curator status: recent_passes[].id)
                "examined": result.plan.examined,
                "changes": [t.as_dict() for t in result.plan.transitions],
                "kept": [{"name": k.name, "why": k.why} for k in result.plan.kept],
                "report_path": result.report_path,
                "snapshot_path": result.snapshot_path,
                "suspect": [{"name": k.name, "why": k.why} for k in result.plan.suspect],
                "consolidation": result.plan.consolidation,
                "merge_plan": result.merge_plan,
            }
        )
        return
    if dry_run:
        click.echo(result.report.rstrip())
    click.echo(result.summary())
    if result.report_path:
        click.echo(f"report: {result.report_path}")
    if result.snapshot_path:
        click.echo(f"snapshot: {result.snapshot_path}")
    if result.plan.suspect:
        click.echo(f"suspect: {', '.join(k.name for k in result.plan.suspect)}")
    if result.plan.consolidation:
        click.echo(f"consolidation: {result.plan.consolidation}")


@curator_group.command("pause")
def curator_pause() -> None:
    """Stop idle passes inside `runner serve` until resumed."""
    from runner.clock import utcnow
    from runner.skills.curator import set_paused

    set_paused(settings().store, True, utcnow())
    click.echo("curator paused (idle passes stop; `runner curator run` still works)")


@curator_group.command("resume")
def curator_resume() -> None:
    """Let `runner serve` run idle passes again."""
    from runner.clock import utcnow
    from runner.skills.curator import set_paused

    set_paused(settings().store, False, utcnow())
    click.echo("curator resumed")


@curator_group.command("consolidate")
def curator_consolidate() -> None:
    """Ask the auxiliary model for merges of overlapping agent-written skills; write a plan file only."""
    from runner.clock import utcnow
    from runner.skills.consolidate import propose

    s = settings()
    proposal = propose(s, now=utcnow(), model=_model(s))
    click.echo(proposal.summary())


def _model(s: Any) -> Callable[[], Any]:
    """The consolidation pass's model, built when it is first needed."""

    def build() -> Any:
        from runner.run.model_choice import side_model

        return side_model(s.config, purpose="curator")

    return build


@curator_group.command("apply")
@click.argument("plan", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--dry-run", is_flag=True, help="check the plan and print its steps; change nothing")
def curator_apply(plan: Path, dry_run: bool) -> None:
    """Carry out a merge plan: snapshot, rewrite each kept skill, archive the merged ones (never deletes).

    A plan naming unknown or non-agent-written skills, or skills changed since it was made, is exit 2."""
    from runner.clock import utcnow
    from runner.skills.merge import apply_plan

    applied = apply_plan(settings(), plan, now=utcnow(), dry_run=dry_run)
    for step in applied.steps:
        click.echo(("would " if dry_run else "") + step)
    if dry_run:
        click.echo("dry run: nothing was changed")
        return
    click.echo(f"snapshot: {applied.snapshot}")
    click.echo(f"report: {applied.report}")


COMMANDS = [curator_group]
