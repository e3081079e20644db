"""``runner web [--bind HOST:PORT]`` and ``runner web token``: the dashboard (runner/web)."""

from __future__ import annotations

import sys

import click

from runner.cli._util import settings


@click.group("web", invoke_without_command=True)
@click.option("--bind", "bind_text", metavar="HOST:PORT", help="where to listen (default: web.bind, 127.0.0.1:9119)")
@click.pass_context
def web_group(ctx: click.Context, bind_text: str | None) -> None:
    """Serve the dashboard until SIGTERM/SIGINT: runs, jobs, the board, approvals, keys, skills,
    charts and /metrics. Anything but a loopback bind needs a token (runner web token)."""
    if ctx.invoked_subcommand is not None:
        return
    from runner.web.auth import parse_bind
    from runner.web.server import prepare, serve_forever

    s = settings()
    where = "--bind" if bind_text else f"{s.config_path}: web.bind"
    bind = parse_bind(bind_text or s.config.web.bind, where=where)
    tokens, sock = prepare(s, bind)  # a refused bind exits before anything is written
    s.store  # noqa: B018 - open (and migrate) the store before serving: its errors are one line
    click.echo(f"runner web: http://{bind}/ ({'token required' if tokens.current().required else 'no token: loopback only'})")
    sys.exit(serve_forever(s, sock, tokens))


@web_group.command("token")
@click.option("--read-only", is_flag=True, help="the read-only token (can view, cannot act)")
@click.option("--rotate", is_flag=True, help="replace the token with a new one")
def web_token(read_only: bool, rotate: bool) -> None:
    """Print the dashboard's token, writing a new one first when there is none (or with --rotate):
    RUNNER_HOME/web-token (or web-token-readonly), mode 0600."""
    from runner.web.auth import write_token

    home = settings().ensure_home()
    path, token, created = write_token(home, read_only=read_only, rotate=rotate)
    click.echo(token)
    click.echo(f"{'wrote' if created else 'kept'} {path} (0600)", err=True)


COMMANDS = [web_group]
