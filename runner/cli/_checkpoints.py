"""``runner runs checkpoints RUN`` and ``runner runs rollback RUN [--to STEP|CHECKPOINT]`` (attached
to the ``runs`` group; the work is ``runner.run.checkpoints``)."""

from __future__ import annotations

import click

from runner.cli._complete import run_ids
from runner.cli._util import echo_json, local_time, settings, table


@click.command("checkpoints")
@click.argument("run_id", shell_complete=run_ids)
@click.option("--json", "as_json", is_flag=True)
def runs_checkpoints(run_id: str, as_json: bool) -> None:
    """List the checkpoints of run RUN_ID's workdir: taken before each model turn that could change
    its files (none before a turn that only reads), at the end of the run, and before each rollback.
    CHANGED AFTER: the files the turns after the checkpoint changed, up to the next one."""
    from runner.cli.runs import find_run
    from runner.run.checkpoints import failures, listed
    from runner.store.runs import events

    store = settings().store
    row = find_run(store, run_id)
    evs = events(store, row["id"])
    points = listed(evs)
    if as_json:
        echo_json({"id": row["id"], "checkpoints": [p.as_json() for p in points], "failed": failures(evs)})
        return
    if not points:
        click.echo(f"no checkpoints for run {row['id']} ({row['job']})")
    else:
        click.echo(f"workdir {points[0].workdir}")
        table(
            [
                [p.id[:12], local_time(p.ts), p.when, p.files, "-" if p.changed is None else p.changed]
                for p in points
            ],
            ["CHECKPOINT", "TAKEN", "WHEN", "FILES", "CHANGED AFTER"],
        )
    failed = failures(evs)
    if failed:
        click.echo(f"{failed} checkpoint(s) failed: see runner runs show {row['id']}")


@click.command("rollback")
@click.argument("run_id", shell_complete=run_ids)
@click.option("--to", "to", metavar="STEP|CHECKPOINT", help="a turn number, or a checkpoint id; default: the first checkpoint")
@click.option("--json", "as_json", is_flag=True)
def runs_rollback(run_id: str, to: str | None, as_json: bool) -> None:
    """Restore the files of run RUN_ID's workdir to a checkpoint, byte for byte: files changed since
    are written back, files created since deleted, files deleted since recreated. Files no
    checkpoint holds (.gitignore'd, over the size cap) are left as they are. First a checkpoint of
    the files as they are now is taken: rolling back to it undoes the rollback. Refused (exit 2)
    while the run is queued or running, and from inside a run."""
    from runner.cli.runs import find_run
    from runner.errors import UsageError
    from runner.run.checkpoints import choose, listed, rollback
    from runner.safety.inside import refuse_inside_run
    from runner.statuses import ACTIVE
    from runner.store.control import whoami
    from runner.store.runs import Recorder, events

    refuse_inside_run("roll back a run's files")
    s = settings()
    row = find_run(s.store, run_id)
    if row["status"] in ACTIVE:
        raise UsageError(f"run {row['id']} is {row['status']}: roll back once it has ended (runner runs cancel stops it)")
    points = listed(events(s.store, row["id"]))
    target = choose(points, to)
    from runner.safety.redact import Redactor

    emit = Recorder(s.store, row["id"], Redactor())
    done = rollback(s, row["id"], points, target, emit, whoami())
    if as_json:
        echo_json(done.as_json(row["id"]))
        return
    click.echo(
        f"rolled back {target.workdir} to checkpoint {target.id[:12]} ({target.when}): "
        f"{done.written} files written, {done.deleted} deleted"
    )
    if done.untouched:
        click.echo(f"left as they are (files no checkpoint holds now stand there): {', '.join(done.untouched)}")
    if done.left_out:
        click.echo(f"not touched (no checkpoint holds them): {', '.join(done.left_out)}")
    click.echo(
        f"the files as they were are checkpoint {done.undo[:12]}; to undo: "
        f"runner runs rollback {row['id']} --to {done.undo[:12]}"
    )
