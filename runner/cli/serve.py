"""``runner serve``: the scheduler daemon (and, later, the kanban dispatcher and idle Curator)."""

from __future__ import annotations

import sys

import click

from runner.cli._util import settings


@click.command("serve")
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default="info",
    show_default=True,
)
def serve(log_level: str) -> None:
    """Fire scheduled jobs until SIGTERM/SIGINT (one instance per RUNNER_HOME)."""
    from runner.serve.daemon import run_serve
    from runner.serve.loops import LOOPS

    sys.exit(run_serve(settings(), loops=LOOPS, log_level=log_level))


COMMANDS = [serve]
