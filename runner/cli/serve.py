"""``runner serve``: the scheduler daemon (with the kanban dispatcher and idle Curator),
``runner serve reload`` and ``runner serve status``."""

from __future__ import annotations

import sys

import click

from runner.cli._util import settings


@click.group("serve", invoke_without_command=True)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default="info",
    show_default=True,
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"], case_sensitive=False),
    help="log lines as text or one JSON object per line (default: $RUNNER_LOG_FORMAT, config log_format, text)",
)
@click.option("--web", "web_bind", metavar="HOST:PORT", help="also serve the dashboard (runner web) from this daemon")
@click.pass_context
def serve(ctx: click.Context, log_level: str, log_format: str | None, web_bind: str | None) -> None:
    """Fire scheduled jobs until SIGTERM/SIGINT (one instance per RUNNER_HOME). Under systemd:
    Type=notify readiness and watchdog, journald-friendly log lines (docs/operations.md)."""
    if ctx.invoked_subcommand is not None:
        return
    import os

    from runner.serve.daemon import run_serve
    from runner.serve.logs import choose_format
    from runner.serve.loops import LOOPS

    s = settings()
    fmt = choose_format(log_format, os.environ, s.config.log_format)
    loops = list(LOOPS)
    if web_bind is not None:
        from runner.web.auth import parse_bind
        from runner.web.server import prepare, serve_loop

        tokens, sock = prepare(s, parse_bind(web_bind, where="--web"))
        loops.append(serve_loop(s, sock, tokens))
    executor = None
    if s.config.executor.type == "celery":  # runs and kanban attempts go to `runner worker`s (docs/distributed.md)
        from runner.dist.kanban_remote import celery_kanban_loop
        from runner.dist.remote import celery_executor
        from runner.serve.loops import kanban_loop

        executor = celery_executor
        loops = [celery_kanban_loop if factory is kanban_loop else factory for factory in loops]
    sys.exit(run_serve(s, loops=loops, log_level=log_level, log_format=fmt, executor=executor))


@serve.command("reload")
def serve_reload() -> None:
    """Make the running serve reload jobs.yaml now (SIGHUP); also lifts the hold a run that
    changed the runner's control files left on hot reload."""
    import os
    import signal

    from runner.errors import UsageError
    from runner.serve.daemon import serve_pid

    home = settings().home
    pid = serve_pid(home)
    if pid is None:
        raise UsageError(f"runner serve is not running for {home}")
    os.kill(pid, signal.SIGHUP)
    click.echo(f"asked serve (pid {pid}) to reload jobs.yaml")


@serve.command("status")
@click.option("--json", "as_json", is_flag=True)
def serve_status_command(as_json: bool) -> None:
    """Whether serve runs on this RUNNER_HOME, from its heartbeat in the store; exit 0 when it
    runs and its main loop wrote a heartbeat lately, 1 otherwise (the Docker image's HEALTHCHECK)."""
    from dataclasses import asdict

    from runner.cli._util import echo_json
    from runner.serve.state import ServeStatus, serve_status

    s = settings()
    status = serve_status(s.store) if s.has_store() else ServeStatus(alive=False)
    if as_json:
        echo_json(asdict(status))
    else:
        click.echo(status.describe())
    if not status.alive:
        sys.exit(1)


COMMANDS = [serve]
