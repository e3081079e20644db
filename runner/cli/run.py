"""``runner run-job NAME``: run one job now, in this process."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from runner.cli import _style
from runner.cli._complete import job_names
from runner.cli._util import echo_json, parse_vars, settings
from runner.events import Event, Payload, show
from runner.host.procs import two_stage_stop
from runner.statuses import RunStatus, Trigger

if TYPE_CHECKING:
    from runner.run.request import RunOutcome


@click.command("run-job")
@click.argument("name", shell_complete=job_names)
@click.option("--var", "var_pairs", multiple=True, metavar="KEY=VALUE", help="override a template variable")
@click.option("--replay", type=click.Path(dir_okay=False, path_type=Path), help="answer the model from a cassette")
@click.option("--record", type=click.Path(dir_okay=False, path_type=Path), help="record model turns to a cassette")
@click.option("--json", "as_json", is_flag=True, help="print the run summary as JSON")
@click.option("--no-deliver", is_flag=True, help="keep the output file; send nothing (no sinks, no alerts)")
@click.option("--review", is_flag=True, help="review the run for a reusable skill afterwards (a replay too)")
def run_job(
    name: str,
    var_pairs: tuple[str, ...],
    replay: Path | None,
    record: Path | None,
    as_json: bool,
    no_deliver: bool,
    review: bool,
) -> None:
    """Run job NAME now and exit with its status (0 ok, 1 failed, 2 bad input, 130 interrupted)."""
    from runner.run.execute import execute
    from runner.run.request import Live, ModelSource, Record, Replay, RunRequest
    from runner.safety.approval import has_tty

    if replay and record:
        raise click.UsageError("--replay and --record cannot be used together")
    s = settings()
    job = s.jobs.get(name)
    if replay is not None and not replay.is_absolute() and not replay.exists():
        candidate = s.jobs.base_dir / replay
        replay = candidate if candidate.exists() else replay
    model: ModelSource = Live()
    if replay is not None:
        model = Replay(replay)
    elif record is not None:
        model = Record(record)
    stop = threading.Event()
    req = RunRequest(
        job=job,
        trigger=Trigger.MANUAL,
        vars_override=parse_vars(var_pairs),
        model=model,
        stdout=sys.stderr if as_json else sys.stdout,
        stop=stop,
        interactive=has_tty(),
        deliver=not no_deliver,
        review=review,
        progress=_progress if sys.stderr.isatty() and not as_json else None,
    )
    # first SIGINT/SIGTERM: finish the current step, end `interrupted`; second: stop hard
    with two_stage_stop(stop, on_first=_waiting_message(job.name)):
        outcome = execute(s, req)
    for failed in outcome.delivery_failed:
        click.echo(f"delivery to {failed['sink']} failed: {failed['detail']}", err=True)
    if as_json:
        echo_json(outcome.as_dict())
    else:
        _style.echo(summary_line(outcome, prerun_stdout), err=True)
    sys.exit(outcome.exit_code)


TAIL_LINES = 10  # of a failed run's script output, on run-job's last line


def summary_line(outcome: RunOutcome, script_stdout: Callable[[str], str]) -> str:
    """``run ID: STATUS (REASON): ERROR``, the status coloured; a failed run's error keeps the
    last ``TAIL_LINES`` lines of its script's output (the stderr tail the error carries, else the
    stdout of a failed pre_run, read by ``script_stdout(run_id)``), each indented."""
    failed = outcome.status != RunStatus.SUCCEEDED
    line = f"run {outcome.run_id}: {_style.status(str(outcome.status), err=True)}"
    if outcome.reason and failed:
        line += f" ({outcome.reason})"
    tail: list[str] = []
    if outcome.error and failed:
        first, *tail = outcome.error.rstrip("\n").split("\n")
        line += f": {first}"
        if not tail and outcome.reason == "pre_run" and "; stderr" not in first:
            out = script_stdout(outcome.run_id).rstrip("\n")
            if out:
                tail = out.split("\n")
                line += "; stdout, last lines:" if len(tail) > 1 else f"; stdout: {tail.pop()}"
    if len(tail) > TAIL_LINES:
        tail = ["...", *tail[-TAIL_LINES:]]
    line += "".join(f"\n  {t}" for t in tail)
    if outcome.silent:
        line += " [SILENT: nothing delivered]"
    if outcome.output_path:
        line += f"\noutput: {outcome.output_path}"
    return line


def prerun_stdout(run_id: str) -> str:
    """The stdout of the run's pre_run, as recorded (redacted); ``""`` when there was none."""
    from runner.store.runs import events

    for ev in events(settings().store, run_id):
        if ev.kind == Event.PRE_RUN:
            return str(ev.data.get("stdout") or "")
    return ""


PROGRESS_KINDS = frozenset({Event.PRE_RUN, Event.RESPONSE, Event.TOOL_CALL, Event.ERROR, Event.APPROVAL})


def _progress(kind: Event, payload: Payload) -> None:
    """One line on the terminal per model turn and tool call (``run-job`` on a TTY only)."""
    if kind not in PROGRESS_KINDS:
        return
    line = show(kind, payload).text(100).splitlines()[0]
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _waiting_message(job: str) -> Callable[[int], None]:
    def say(signum: int) -> None:
        name = signal.Signals(signum).name
        sys.stderr.write(
            f"runner: {name} received: job {job} finishes its current step, then ends interrupted "
            f"(send {name} again to stop now)\n"
        )
        sys.stderr.flush()

    return say


COMMANDS = [run_job]
