"""Where a server runs: the transport ``mcp.Client`` gets for one server of one run.

A stdio server of a job on a backend that can host one (``StdioHost``: Docker, SSH) runs inside
that backend, so a sandboxed job's tools stay in its sandbox: ``docker exec -i`` into the run's
container, ``ssh`` over the backend's master connection, or on the local backend a bubblewrap
sandbox of its own with the run's plan. With ``sandbox: off`` it runs on the host, in the job's
workdir. Only the variables the server's ``env:`` names are passed, besides
the few the SDK always gives a child (HOME, PATH, ...). An HTTP server is reached from the host.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol, runtime_checkable

from runner.config.mcp import McpServer
from runner.mcp.client import McpFailure, Target


@runtime_checkable
class StdioHost(Protocol):
    """A backend that starts a long-lived process with its stdin and stdout wired to ours."""

    def stdio_command(
        self, argv: Sequence[str], env: Mapping[str, str], cwd: str | None
    ) -> tuple[list[str], dict[str, str]] | None:
        """(the local command line that runs ``argv`` inside the backend, its environment), or
        None when the server runs on the host (the local backend without a sandbox)."""
        ...


def target_for(server: McpServer, backend: Any, getenv: Callable[[str], str | None]) -> tuple[Target, str]:
    """(the transport factory, where the server runs: host | backend | url) for ``server``."""
    if server.url is not None:
        headers, missing = server.header_values(getenv)
        _require(missing, "headers")
        return _http(server.url, headers), server.url
    assert server.command is not None
    env, missing = server.env_values(getenv)
    _require(missing, "env")
    argv = [server.command, *server.args]
    inside = backend.stdio_command(argv, env, server.cwd) if isinstance(backend, StdioHost) else None
    if inside is not None:
        local, local_env = inside
        return _stdio(local[0], local[1:], local_env, None), "backend"
    return _stdio(server.command, list(server.args), env, server.cwd or backend.workdir), "host"


def _require(missing: list[str], field: str) -> None:
    if missing:
        raise McpFailure(f"{field}: environment variable {', '.join(missing)} is not set")


def stdio_target(command: str, args: list[str], env: dict[str, str], cwd: str | None) -> Target:
    """A stdio server started on this host (the keep-alive bridge's, too)."""
    return _stdio(command, args, env, cwd)


def http_target(url: str, headers: dict[str, str]) -> Target:
    """A streamable-HTTP endpoint (a keep-alive bridge's, too)."""
    return _http(url, headers)


def _stdio(command: str, args: list[str], env: dict[str, str], cwd: str | None) -> Target:
    def make(errlog: Any) -> Any:
        from mcp.client.stdio import StdioServerParameters, stdio_client

        return stdio_client(StdioServerParameters(command=command, args=args, env=env, cwd=cwd), errlog=errlog)

    return make


def _http(url: str, headers: dict[str, str]) -> Target:
    def make(errlog: Any) -> Any:
        return _http_transport(url, headers)

    return make


@asynccontextmanager
async def _http_transport(url: str, headers: dict[str, str]) -> AsyncIterator[Any]:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0)) as http,
        streamable_http_client(url, http_client=http) as streams,
    ):
        yield streams
