"""``runner approvals list | check | pending | grant | deny``: the approval audit, a dry check of
`allow:` patterns, and the answers to approvals a run is parked on."""

from __future__ import annotations

import json

import click

from runner.cli._util import echo_json, local_time, settings, table


@click.group("approvals")
def approvals_group() -> None:
    """Dangerous-command decisions: what was asked, what was decided, by whom."""


@approvals_group.command("list")
@click.option("--run", "run_id", help="only this run")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 100000))
@click.option("--json", "as_json", is_flag=True)
def approvals_list(run_id: str | None, limit: int, as_json: bool) -> None:
    """List recorded approval decisions, newest first."""
    store = settings().store
    where, params = ("WHERE run_id = ?", [run_id]) if run_id else ("", [])
    rows = store.query(f"SELECT * FROM approvals {where} ORDER BY id DESC LIMIT ?", (*params, limit))
    for r in rows:
        r["reasons"] = json.loads(r["reasons"] or "[]")
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo("no approval decisions recorded")
        return
    table(
        [
            [
                local_time(r["ts"]),
                r["run_id"],
                r["level"],
                r["decision"],
                r["decided_by"],
                r["policy"],
                "; ".join(r["reasons"]),
                r["command"][:80],
            ]
            for r in rows
        ],
        ["TIME", "RUN", "LEVEL", "DECISION", "BY", "POLICY", "REASONS", "COMMAND"],
    )


@approvals_group.command("check")
@click.option("--job", "job_name", help="use this job's approvals policy and allow patterns")
@click.option("--json", "as_json", is_flag=True)
@click.argument("command", nargs=-1, required=True)
def approvals_check(job_name: str | None, as_json: bool, command: tuple[str, ...]) -> None:
    """Classify COMMAND and show what the job's policy would decide, without running it.

    Put the command after `--`: runner approvals check --job nightly-report -- rm -rf build
    """
    from runner.safety.approval import callback_for, decide
    from runner.safety.shell import classify

    text = " ".join(command)
    policy, allow = "deny", tuple[str, ...]()
    if job_name:
        job = settings().jobs.get(job_name)
        policy, allow = job.spec.approvals, tuple(job.spec.allow)
    verdict = classify(text)
    decision = decide(text, policy=policy, allow=allow, callback=callback_for(policy, interactive=False))
    result = {
        "command": text,
        "level": verdict.level,
        "reasons": list(verdict.reasons),
        "segments": list(verdict.segments),
        "policy": policy,
        "allow": list(allow),
        "decision": "approved" if decision.allowed else "denied",
        "decided_by": decision.decided_by,
    }
    if policy == "manual" and verdict.level == "dangerous" and decision.decided_by == "policy":
        result["note"] = "manual asks on a TTY; unattended runs park until `runner approvals grant | deny`"
    if as_json:
        echo_json(result)
        return
    click.echo(f"level     {verdict.level}")
    if verdict.reasons:
        click.echo(f"reasons   {'; '.join(verdict.reasons)}")
    click.echo(f"policy    {policy}{'  allow: ' + ', '.join(allow) if allow else ''}")
    click.echo(f"decision  {result['decision']} (by {decision.decided_by})")
    if "note" in result:
        click.echo(f"note      {result['note']}")


@approvals_group.command("pending")
@click.option("--json", "as_json", is_flag=True)
def approvals_pending(as_json: bool) -> None:
    """Approvals runs are parked on now (approvals: manual with nobody at a terminal), oldest first."""
    from runner.store.control import pending_approvals

    items = pending_approvals(settings().store)
    if as_json:
        echo_json([p.as_dict() for p in items])
        return
    if not items:
        click.echo("no run is waiting for an approval")
        return
    table(
        [
            [
                p.id,
                p.run_id,
                p.job,
                local_time(p.requested_at),
                local_time(p.expires_at),
                "; ".join(p.reasons),
                p.command[:80],
            ]
            for p in items
        ],
        ["ID", "RUN", "JOB", "ASKED", "EXPIRES", "REASONS", "COMMAND"],
    )
    click.echo("answer with: runner approvals grant ID  |  runner approvals deny ID [--reason TEXT]")


@approvals_group.command("grant")
@click.argument("approval_id")
def approvals_grant(approval_id: str) -> None:
    """Let the parked run run its command; it continues at once. Exit 2 when unknown or already decided."""
    from runner.store.control import answer_approval, whoami

    by = whoami()
    answer_approval(settings().store, approval_id, granted=True, by=by)
    click.echo(f"approval {approval_id}: granted by {by}")


@approvals_group.command("deny")
@click.argument("approval_id")
@click.option("--reason", help="told to the model with the denial")
def approvals_deny(approval_id: str, reason: str | None) -> None:
    """Refuse the parked run's command; the model is told (with --reason) and the run continues."""
    from runner.store.control import answer_approval, whoami

    by = whoami()
    answer_approval(settings().store, approval_id, granted=False, by=by, reason=reason)
    click.echo(f"approval {approval_id}: denied by {by}")


COMMANDS = [approvals_group]
