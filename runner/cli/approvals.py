"""``runner approvals list | check | pending | grant | deny``: the approval audit, a dry check of
what a command meets under each policy (and `allow:` patterns), and the answers to approvals a run
is parked on."""

from __future__ import annotations

import json

import click

from runner.cli._complete import job_names, run_ids
from runner.cli._util import echo_json, local_time, settings, table


@click.group("approvals")
def approvals_group() -> None:
    """Dangerous-command decisions: what was asked, what was decided, by whom."""


@approvals_group.command("list")
@click.option("--run", "run_id", help="only this run", shell_complete=run_ids)
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
    judged = any(r.get("judge_verdict") for r in rows)  # approvals: smart: the judge's verdict and reason
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
                *([_judged(r)] if judged else []),
                r["command"][:80],
            ]
            for r in rows
        ],
        ["TIME", "RUN", "LEVEL", "DECISION", "BY", "POLICY", "REASONS", *(["JUDGE"] if judged else []), "COMMAND"],
    )


def _judged(row: dict[str, object]) -> str:
    if not row.get("judge_verdict"):
        return ""
    return f"{row['judge_verdict']} ({row.get('judge') or 'no model'}): {str(row.get('judge_reason') or '')[:80]}"


@approvals_group.command("check")
@click.option("--job", "job_name", shell_complete=job_names, help="use this job's approvals policy and allow patterns")
@click.option("--json", "as_json", is_flag=True)
@click.argument("command", nargs=-1, required=True)
def approvals_check(job_name: str | None, as_json: bool, command: tuple[str, ...]) -> None:
    """Classify COMMAND and show what would happen to it under the job's policy and under each
    policy, without running it.

    Put the command after `--`: runner approvals check --job nightly-report -- rm -rf build
    """
    from runner.safety.approval import AutoDeny, Outcome, decide, outcome
    from runner.safety.latitude import Approvals
    from runner.safety.shell import classify

    text = " ".join(command)
    policy, allow, judge = Approvals.DENY, tuple[str, ...](), None
    if job_name:
        s = settings()
        job = s.jobs.get(job_name)
        policy, allow = Approvals(job.spec.approvals), tuple(job.spec.allow)
        judge = job.spec.auxiliary or s.config.auxiliary or ""
    verdict = classify(text)
    decision = decide(text, policy=policy, allow=allow, callback=AutoDeny())  # nobody asked: what the policy leaves
    each = {p: outcome(decision, p) for p in Approvals}
    said = {p: _said(o, judge) for p, o in each.items()}
    if judge == "" and each[Approvals.SMART] == Outcome.JUDGED:  # no auxiliary model: the judge denies
        each[Approvals.SMART] = Outcome.DENIED
    mine = each[policy]
    result = {
        "command": text,
        "level": verdict.level,
        "reasons": list(verdict.reasons),
        "segments": list(verdict.segments),
        "policy": str(policy),
        "allow": list(allow),
        "decision": _DECISION[mine],
        "decided_by": _DECIDED_BY.get(mine, decision.decided_by),
        "outcome": str(mine),
        "says": said[policy],
        "policies": {str(p): {"outcome": str(o), "says": said[p]} for p, o in each.items()},
    }
    if as_json:
        echo_json(result)
        return
    click.echo(f"level     {verdict.level}")
    if verdict.reasons:
        click.echo(f"reasons   {'; '.join(verdict.reasons)}")
    click.echo(f"policy    {policy}{'  allow: ' + ', '.join(allow) if allow else ''}{'' if job_name else ' (no --job)'}")
    click.echo(f"outcome   {said[policy]}")
    if mine == Outcome.REFUSED:
        click.echo("          nobody is asked, neither a person nor the judge model")
        return
    click.echo("under each policy:")
    for p in Approvals:
        mark = "  <- this job" if job_name and p == policy else ""
        click.echo(f"  {p:<8} {said[p]}{mark}")


# keyed by runner.safety.approval.Outcome's values (imported by the command only, not at start-up):
# the JSON's ``decision`` (approved | denied, or who decides when the policy leaves it open)
_DECISION = {"runs": "approved", "denied": "denied", "refused": "denied", "waits": "person", "judged": "judge"}
_DECIDED_BY = {"waits": "person", "judged": "judge"}


def _said(what: str, judge: str | None) -> str:
    """One ``Outcome`` in words; ``judge``: the job's auxiliary model ('' none, None: no --job)."""
    if what == "runs":
        return "runs"
    if what == "denied":
        return "denied (the model is told to find another way)"
    if what == "refused":
        return "refused under every policy (hardline)"
    if what == "waits":
        return "waits for a person: y/N at a terminal, else the run parks (runner approvals grant ID | deny ID)"
    if judge == "":
        return "denied: the judge needs an auxiliary model (auxiliary: in config.yaml or the job)"
    model = f" ({judge})" if judge else ""
    return f"asks the judge model{model}: approve runs it, deny denies, escalate waits for a person"


@approvals_group.command("pending")
@click.option("--json", "as_json", is_flag=True)
def approvals_pending(as_json: bool) -> None:
    """Approvals runs are parked on now (approvals: manual with nobody at a terminal, or what a
    smart judge escalated), oldest first."""
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
