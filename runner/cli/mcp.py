"""``runner mcp serve [--http HOST:PORT]``: runner as an MCP server (the work: runner/mcp/serve.py)."""

from __future__ import annotations

import socket
from dataclasses import dataclass

import click

from runner.cli._util import settings
from runner.settings import Settings


@click.group("mcp")
def mcp_group() -> None:
    """runner for other agents: an MCP server of its jobs and runs."""


@dataclass(frozen=True)
class _Serve:
    """``runner.mcp.serve.ServeSide`` from the serve package."""

    s: Settings

    def pid(self) -> int | None:
        from runner.serve.daemon import serve_pid

        return serve_pid(self.s.home)

    def paused(self) -> set[str]:
        from runner.serve.state import paused_jobs

        return set(paused_jobs(self.s.store)) if self.s.has_store() else set()


@mcp_group.command("serve")
@click.option("--http", "http_bind", metavar="HOST:PORT", help="streamable HTTP at http://HOST:PORT/mcp (default: stdio)")
def mcp_serve(http_bind: str | None) -> None:
    """Serve runner's jobs and runs as MCP tools until stdin closes (stdio) or SIGTERM/SIGINT
    (--http): list_jobs, trigger_job, run_status, run_output, list_runs, pending_approvals, and
    answer_approval when config.yaml has mcp_serve: {allow_approvals: true}. Over HTTP every request
    needs the dashboard's token (runner web token) in Authorization: Bearer; the read-only token
    may only read."""
    from runner.errors import UsageError
    from runner.store.control import whoami

    s = settings()
    s.jobs  # noqa: B018 - a bad jobs.yaml is one line and exit 2 before serving
    s.store  # noqa: B018 - open (and migrate) the store first: its errors are one line
    if http_bind is None:
        from runner.mcp.serve import serve_stdio

        serve_stdio(s, _Serve(s), by=f"mcp:{whoami()}")
        return
    from runner.host import secrets
    from runner.mcp.serve import serve_http
    from runner.web.auth import load_tokens, parse_bind

    bind = parse_bind(http_bind, where="--http")
    web = s.config.web
    tokens = load_tokens(s.home, token_ref=web.token, read_only_ref=web.read_only_token, getenv=secrets.getenv)
    if tokens.admin is None:
        raise UsageError("runner mcp serve --http needs the dashboard's token: run `runner web token` first")
    family = socket.AF_INET6 if ":" in bind.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((bind.host, bind.port))
    except OSError as exc:
        sock.close()
        raise UsageError(f"runner mcp serve: cannot listen on {bind}: {exc.strerror or exc}") from None
    sock.listen(128)
    click.echo(f"runner mcp serve: http://{bind}/mcp (bearer token required)", err=True)
    serve_http(s, _Serve(s), bind.host, tokens, sock)


COMMANDS = [mcp_group]
