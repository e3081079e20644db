"""``runner approvals list | check``: the approval audit and a dry check of `allow:` patterns."""

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
        result["note"] = "manual asks on a TTY; unattended runs deny"
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


COMMANDS = [approvals_group]
