"""``runner runs prune``: retention by hand (serve applies config.yaml's ``retention:`` daily)."""

from __future__ import annotations

import dataclasses

import click

from runner.cli._util import echo_json, settings
from runner.settings import Settings

DEFAULT_OLDER_THAN = "30d"
CLI_BATCH = 2000  # the most runs per transaction here (each stops sooner at ~25 ms of lock, as under serve)


@click.command("prune")
@click.option(
    "--older-than",
    help=f"runs created longer ago than this (30d, 12h); default retention.runs_older_than, else {DEFAULT_OLDER_THAN}",
)
@click.option(
    "--keep-last",
    type=click.IntRange(0),
    help="keep the newest N runs of every job whatever their age; default retention.keep_last (20)",
)
@click.option("--dry-run", is_flag=True, help="count what would go, change nothing")
@click.option("--json", "as_json", is_flag=True)
def runs_prune(older_than: str | None, keep_last: int | None, dry_run: bool, as_json: bool) -> None:
    """Remove old runs with their events, approval audit, output files (under RUNNER_HOME/outputs)
    and transcripts, in short transactions, giving the space they free back to the file system as
    they go (incremental vacuum). Never removes a queued or
    running run, one with an open budget reservation or a pending approval, an attempt of an
    unfinished kanban task, or a job's newest succeeded run (its output is the next run's
    last_output). Also removes kanban attempt logs older than retention.logs_older_than."""
    from runner.clock import utcnow
    from runner.config.schedules import parse_duration
    from runner.errors import UsageError
    from runner.store.retention import Policy, Pruner, old_logs, plan

    s = settings()
    conf = s.config.retention
    try:
        seconds = (
            parse_duration(older_than) if older_than else (conf.runs_older_than or parse_duration(DEFAULT_OLDER_THAN))
        )
    except ValueError as exc:
        raise UsageError(f"--older-than: {exc}") from None
    policy = Policy(seconds, conf.keep_last if keep_last is None else keep_last, conf.outputs, conf.transcripts)
    now = utcnow()
    logs = old_logs(s.home, s.store, conf.logs_older_than, now) if conf.logs_older_than is not None else []
    forgotten = 0
    if dry_run:
        result = plan(s.store, s.home, policy, now, conf.batch)
    else:
        result = Pruner(s.store, s.home, policy, now, batch=max(conf.batch, CLI_BATCH)).run()
        for path in logs:
            path.unlink(missing_ok=True)
        forgotten = forget_checkpoints(s)
    if as_json:
        echo_json({**dataclasses.asdict(result), "logs": [str(p) for p in logs], "checkpoints": forgotten})
        return
    verb = "would remove" if dry_run else "removed"
    click.echo(
        f"{verb} {result.runs:,} runs ({result.events:,} events, {result.approvals:,} approvals), "
        f"{result.files:,} files, {len(logs):,} kanban logs; "
        f"{'' if dry_run else 'freed '}{_size(result.bytes_freed)}{' of files' if dry_run else ''}"
    )
    if forgotten:
        click.echo(f"forgot the workdir checkpoints of {forgotten:,} runs the ledger no longer has")


def forget_checkpoints(s: Settings) -> int:
    """Drop the checkpoints of runs that are gone from the ledger (``runner.run.shadow.prune``)."""
    from runner.run.shadow import prune
    from runner.store.ledger import rows_of

    return prune(s.home, lambda ids: set(rows_of(s.store, ids)))


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"
