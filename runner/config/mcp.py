"""config.yaml ``mcp_servers:`` and the ``mcp:`` names jobs use in ``toolsets:``.

A server is either stdio (``command``, ``args``, ``env``, ``cwd``) or streamable HTTP (``url``,
``headers``). Secrets never appear literally: ``env`` names variables passed through from the
runner's environment (a list of names, or ``NAME: env:OTHER``); a header value may be
``env:NAME``. ``approvals`` says how the approval gate treats the server's tools: by default a
tool annotated ``readOnlyHint`` is safe and every other one dangerous; ``approvals: safe`` (or
``dangerous``) sets every tool of the server, ``approvals: {TOOL: safe, ...}`` single tools. ``keep_alive: true`` (stdio servers of jobs on the
local backend, under ``runner serve``) keeps one server per job running across its runs. A server
that does not start fails the run that names it (``tools_unavailable``) unless it is ``optional:
true`` (a bool, strictly): then the run goes on without its tools.

No MCP SDK here: jobs.yaml validation and ``jobs list`` read these models.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Literal

from pydantic import Field, StrictBool, field_validator, model_validator

from runner.config.refs import PREFIX, SERVER_NAME, is_ref, parse_ref
from runner.config.strict import Strict

__all__ = ["PREFIX", "SERVER_NAME", "Level", "McpServer", "is_ref", "parse_ref"]

Level = Literal["safe", "dangerous"]
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class McpServer(Strict):
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: list[str] | dict[str, str] = Field(default_factory=list)
    cwd: str | None = None  # on the backend; default the job's workdir
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    approvals: Level | dict[str, Level] | None = None
    start_timeout: float = Field(30.0, gt=0)  # spawn + handshake + tool list
    call_timeout: float = Field(120.0, gt=0)
    keep_alive: bool = False  # under serve, a local job's stdio server lives across its runs (runner.mcp.bridge)
    optional: StrictBool = False  # a run goes on without the server's tools when it does not start (else it fails)

    @model_validator(mode="after")
    def _one_kind(self) -> McpServer:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either command (a stdio server) or url (a streamable HTTP server)")
        if self.url is not None and (self.args or self.env or self.cwd):
            raise ValueError("args, env and cwd are for stdio servers (with command), not url")
        if self.command is not None and self.headers:
            raise ValueError("headers are for HTTP servers (with url), not command")
        if self.url is not None and not re.match(r"^https?://", self.url):
            raise ValueError("url must start with http:// or https://")
        return self

    @field_validator("env")
    @classmethod
    def _env(cls, value: list[str] | dict[str, str]) -> list[str] | dict[str, str]:
        names = value if isinstance(value, list) else list(value)
        for name in names:
            if not _ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not an environment variable name")
        if isinstance(value, dict):
            for name, ref in value.items():
                if not ref.startswith("env:") or not _ENV_NAME.match(ref[4:]):
                    raise ValueError(f"{name}: values are env:NAME (secrets never sit in config.yaml)")
        return value

    @property
    def kind(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command is not None else "http"

    def env_values(self, getenv: Callable[[str], str | None]) -> tuple[dict[str, str], list[str]]:
        """(the variables the server gets, the names that are unset)."""
        pairs = [(n, n) for n in self.env] if isinstance(self.env, list) else [(n, r[4:]) for n, r in self.env.items()]
        out: dict[str, str] = {}
        missing: list[str] = []
        for name, source in pairs:
            value = getenv(source)
            if value is None:
                missing.append(source)
            else:
                out[name] = value
        return out, missing

    def header_values(self, getenv: Callable[[str], str | None]) -> tuple[dict[str, str], list[str]]:
        out: dict[str, str] = {}
        missing: list[str] = []
        for name, value in self.headers.items():
            if value.startswith("env:"):
                resolved = getenv(value[4:])
                if resolved is None:
                    missing.append(value[4:])
                    continue
                value = resolved
            out[name] = value
        return out, missing

    def level_of(self, tool: str, read_only: bool) -> Level:
        """How the approval gate treats ``tool`` (its original name on the server)."""
        if isinstance(self.approvals, str):
            return self.approvals
        if isinstance(self.approvals, dict) and tool in self.approvals:
            return self.approvals[tool]
        return "safe" if read_only else "dangerous"
