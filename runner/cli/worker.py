"""``runner worker``: a Celery worker that runs serve's runs on this machine (executor: celery)."""

from __future__ import annotations

import sys

import click

from runner.cli._util import settings


@click.command("worker")
@click.option("--hostname", "-n", default=None, help="The worker's name (default runner@HOST); unique per worker.")
@click.option("--concurrency", "-c", type=click.IntRange(1, 512), default=4, show_default=True, help="Runs at once.")
@click.option(
    "--queues",
    "-Q",
    default="runner",
    show_default=True,
    help="Comma-separated queues to take runs from (jobs' queue:).",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default="info",
    show_default=True,
)
def worker(hostname: str | None, concurrency: int, queues: str, log_level: str) -> None:
    """Run the runs serve sends through the broker (config.yaml executor: {type: celery, broker: URL}),
    from this machine's own project folder, until SIGTERM/SIGINT."""
    from runner.dist.worker import default_hostname, run_worker
    from runner.errors import UsageError

    s = settings()
    executor = s.config.executor
    if executor.type != "celery":
        raise UsageError(
            f"{s.config_path}: executor.type is {executor.type}; runner worker needs executor: {{type: celery, broker: URL}}"
        )
    names = [q.strip() for q in queues.split(",") if q.strip()]
    if not names:
        raise UsageError("--queues: name at least one queue")
    _ = s.jobs  # a broken jobs.yaml is reported now (exit 2), not at the first run
    sys.exit(
        run_worker(
            s,
            hostname=hostname or default_hostname(),
            concurrency=concurrency,
            queues=names,
            loglevel=log_level.upper(),
        )
    )


COMMANDS = [worker]
