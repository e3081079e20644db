"""``runner mcp serve``: runner as an MCP server other agents call (Claude Code, Codex, Hermes).

Built on the ``mcp`` SDK's ``MCPServer``, over stdio or streamable HTTP (``--http HOST:PORT``).
The tools read the store as the CLI does and act through the same store paths: ``trigger_job``
writes the trigger request ``runner jobs trigger`` writes (``runner.store.control.request_trigger``)
and serve runs it; ``answer_approval`` is ``runner approvals grant | deny``'s
``answer_approval``. Every result is JSON that names each run by ``id``, redacted like the CLI's
output (``Redactor``).

Who may do what (``Grants``): over stdio, whoever started the process (as with the CLI); over HTTP,
the dashboard's tokens (``runner web token``) as ``Authorization: Bearer``: the full token may
trigger, the read-only token may only read, and a request without a valid token is answered 401.
``answer_approval`` exists only when config.yaml says ``mcp_serve: {allow_approvals: true}``, and
never for the read-only token. The SDK is imported here, only by ``runner mcp serve``.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from runner.errors import RunnerError, UsageError
from runner.safety.redact import Redactor
from runner.statuses import RunStatus

if TYPE_CHECKING:
    from runner.settings import Settings

OUTPUT_CHARS = 100_000  # of a run's output in run_output; the rest is named, not sent
TRIGGER_WAIT_S = 5.0  # how long trigger_job waits for a running serve to open the run
MAX_LIMIT = 500


class ToolRefused(Exception):
    """A call that cannot be done as asked: its one-line message is the tool error the client sees."""


@dataclass(frozen=True)
class Grants:
    """What a connection may do besides reading."""

    trigger: bool
    approvals: bool


class ServeSide(Protocol):
    """What the tools need to know of ``runner serve`` (the command gives it: runner.serve imports
    runner.mcp, so not the other way round)."""

    def pid(self) -> int | None:
        """The pid of the serve running on this RUNNER_HOME, or None."""
        ...

    def paused(self) -> set[str]:
        """The jobs paused with ``runner jobs pause``."""
        ...


class TokenPair(Protocol):
    """The dashboard's tokens (``runner.web.auth.Tokens``): None when not set."""

    @property
    def admin(self) -> str | None: ...

    @property
    def viewer(self) -> str | None: ...


@dataclass(frozen=True)
class Tools:
    """The tools' work, synchronous and transport-free (the SDK runs each call in a worker thread)."""

    settings: Settings
    serve: ServeSide
    by: str  # who asks, as the audit records it
    redactor: Redactor

    def _clean(self, value: Any) -> Any:
        return self.redactor.redact_obj(json.loads(json.dumps(value, default=str)))

    def list_jobs(self) -> list[dict[str, Any]]:
        from runner.store.queries import last_runs

        s = self.settings
        jobs = s.jobs
        last = last_runs(s.store) if s.has_store() else {}
        paused = self.serve.paused()
        rows = []
        for name, job in sorted(jobs.jobs.items()):
            rows.append(
                {
                    "name": name,
                    "description": job.spec.description,
                    "schedule": job.spec.schedule,
                    "enabled": job.spec.enabled,
                    "paused": name in paused,
                    "last_status": str(last[name].status) if name in last else None,
                    "last_run_at": last[name].created_at if name in last else None,
                }
            )
        return list(self._clean(rows))

    def trigger_job(self, name: str, vars: dict[str, str] | None = None) -> dict[str, Any]:
        from runner.store.control import request_trigger, trigger_outcome, trigger_vars

        given = trigger_vars(vars or {})  # checked before the job: a bad var is a one-line tool error
        s = self.settings
        if name not in s.jobs.jobs:
            raise ToolRefused(f"no job {name!r} in {s.jobs_path} (see list_jobs)")
        request_id = request_trigger(s.store, name, by=self.by, vars=dict(given))
        pid = self.serve.pid()
        run_id: str | None = None
        if pid is not None:  # a running serve takes the request within a second: wait for its run id
            deadline = time.monotonic() + TRIGGER_WAIT_S
            while time.monotonic() < deadline:
                found = trigger_outcome(s.store, request_id)
                if found is not None and found.handled:
                    run_id = found.run_id
                    if run_id is None:
                        raise ToolRefused(f"serve did not start {name}: {found.outcome}")
                    break
                time.sleep(0.1)
        if run_id is not None:
            said = f"serve (pid {pid}) started run {run_id}; see run_status"
        elif pid is not None:
            said = f"written to the store as request {request_id}; serve (pid {pid}) runs it shortly (list_runs)"
        else:
            said = f"written to the store as request {request_id}; serve is not running: it runs when serve starts"
        return {"id": run_id, "request": request_id, "job": name, "serve_pid": pid, "status": said}

    def _run(self, run_id: str) -> dict[str, Any]:
        from runner.store.runs import run_with_id, runs_with_id_like

        text = run_id.strip()
        if not text or len(text) > 64:
            raise ToolRefused(f"{run_id[:40]!r} is not a run id (see list_runs)")
        row = run_with_id(self.settings.store, text)
        if row is None and len(text) >= 4:  # a prefix of one run's id, as runner runs show takes it
            escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            rows = runs_with_id_like(self.settings.store, f"{escaped}%", 2)
            row = rows[0] if len(rows) == 1 else None
            if len(rows) > 1:
                raise ToolRefused(f"run id {text!r} is ambiguous (see list_runs)")
        if row is None:
            raise ToolRefused(f"no run {text!r} (see list_runs)")
        return dict(row)

    def run_status(self, run_id: str) -> dict[str, Any]:
        from runner.store.control import waiting_on

        row = self._run(run_id)
        keys = (
            "id", "job", "trigger", "status", "reason", "error", "created_at", "started_at", "ended_at",
            "iterations", "prompt_tokens", "completion_tokens", "cost_usd", "model", "parent_run_id",
            "delivery_failed",
        )  # fmt: skip
        out = {k: row.get(k) for k in keys}
        waiting = waiting_on(self.settings.store, row["id"]) if row["status"] == RunStatus.RUNNING else None
        out["waiting_on_approval"] = waiting.as_dict() if waiting else None
        return dict(self._clean(out))

    def run_output(self, run_id: str) -> dict[str, Any]:
        from runner.store.files import FileKind, read

        row = self._run(run_id)
        text: str | None = None
        if row.get("output_path"):
            try:
                text = read(self.settings.store, row["id"], FileKind.OUTPUT, row["output_path"])
            except OSError as exc:
                raise ToolRefused(f"run {row['id']}: cannot read its output: {exc.strerror or exc}") from None
        more = 0
        if text is not None and len(text) > OUTPUT_CHARS:
            more, text = len(text) - OUTPUT_CHARS, text[:OUTPUT_CHARS]
        out = {"id": row["id"], "job": row["job"], "status": row["status"], "output": text, "more_chars": more}
        return dict(self._clean(out))

    def list_runs(self, job: str | None = None, status: str | None = None, limit: int = 20) -> list[dict[str, Any]]:
        from runner.store.runs import list_runs

        if status is not None and status not in {s.value for s in RunStatus}:
            raise ToolRefused(f"status {status!r}: use one of {', '.join(s.value for s in RunStatus)}")
        if not 1 <= limit <= MAX_LIMIT:
            raise ToolRefused(f"limit {limit}: use 1 to {MAX_LIMIT}")
        rows = list_runs(self.settings.store, job=job, status=status, limit=limit)
        keys = ("id", "job", "trigger", "status", "reason", "created_at", "started_at", "ended_at", "cost_usd")
        return list(self._clean([{k: r.get(k) for k in keys} for r in rows]))

    def pending_approvals(self) -> list[dict[str, Any]]:
        from runner.store.control import pending_approvals

        return list(self._clean([a.as_dict() for a in pending_approvals(self.settings.store)]))

    def answer_approval(self, id: str, grant: bool, reason: str = "") -> dict[str, Any]:
        from runner.store.control import ControlRefused, answer_approval, get_request

        try:
            answer_approval(self.settings.store, id, granted=grant, by=self.by, reason=reason or None)
        except ControlRefused as exc:
            raise ToolRefused(str(exc)) from None
        req = get_request(self.settings.store, id)
        return dict(self._clean(req.as_dict()))


def build(tools: Tools, grants: Grants) -> Any:
    """The ``MCPServer`` with the tools ``grants`` allow."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import ToolAnnotations

    server: Any = MCPServer(
        "runner",
        instructions="runner's jobs and runs: list, trigger, follow a run, read its output.",
        log_level="WARNING",
    )
    read_only = ToolAnnotations(read_only_hint=True)

    def text(value: Any) -> str:
        return json.dumps(value, indent=2, ensure_ascii=False)

    def guarded(fn: Any, *args: Any, **kw: Any) -> str:
        try:
            return text(fn(*args, **kw))
        except (ToolRefused, RunnerError) as exc:
            raise ToolError(str(exc)) from None

    @server.tool(annotations=read_only)
    def list_jobs() -> str:
        """The jobs of jobs.yaml: name, description, schedule, enabled, paused, last status."""
        return guarded(tools.list_jobs)

    @server.tool(annotations=read_only)
    def run_status(run_id: str) -> str:
        """A run's status, reason, times, tokens and cost (an id, a prefix or a unique part of one)."""
        return guarded(tools.run_status, run_id)

    @server.tool(annotations=read_only)
    def run_output(run_id: str) -> str:
        """A run's final output (redacted); null while it runs or when it wrote none."""
        return guarded(tools.run_output, run_id)

    @server.tool(annotations=read_only)
    def list_runs(job: str | None = None, status: str | None = None, limit: int = 20) -> str:
        """Recent runs, newest first, optionally of one job and/or with one status."""
        return guarded(tools.list_runs, job, status, limit)

    @server.tool(annotations=read_only)
    def pending_approvals() -> str:
        """Approvals runs are waiting on now (command redacted), oldest first."""
        return guarded(tools.pending_approvals)

    if grants.trigger:

        @server.tool()
        def trigger_job(name: str, vars: dict[str, str] | None = None) -> str:
            """Ask runner serve to run job NAME now (trigger manual, through its pool and the job's
            overlap), as `runner jobs trigger` does. vars: template variables for this run (strings;
            as `--var KEY=VALUE`: they override the job's vars; at most 20, each up to 4,000
            characters). Returns the run id once serve opened the run (within a few seconds when
            serve runs), else the request id."""
            return guarded(tools.trigger_job, name, vars)

    if grants.approvals:

        @server.tool()
        def answer_approval(id: str, grant: bool, reason: str = "") -> str:
            """Grant (grant=true) or deny a pending approval; the waiting run continues with it."""
            return guarded(tools.answer_approval, id, grant, reason)

    return server


def serve_stdio(settings: Settings, serve: ServeSide, *, by: str) -> None:
    tools = Tools(settings, serve, by, Redactor())
    grants = Grants(trigger=True, approvals=settings.config.mcp_serve.allow_approvals)
    build(tools, grants).run()


def _unauthorized(send: Any) -> Any:
    async def reply() -> None:
        headers = [(b"content-type", b"text/plain"), (b"www-authenticate", b"Bearer")]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": b"unauthorized: send the dashboard's token as a bearer token"})

    return reply()


def http_app(settings: Settings, serve: ServeSide, tokens: TokenPair, host: str) -> Any:
    """The ASGI app: two servers (full token, read-only token), each reached only with its token."""
    if tokens.admin is None:
        raise UsageError("runner mcp serve --http needs the dashboard's token: run `runner web token` first")
    allow = settings.config.mcp_serve.allow_approvals
    full = build(Tools(settings, serve, "mcp:token", Redactor()), Grants(trigger=True, approvals=allow))
    viewer = build(Tools(settings, serve, "mcp:read-only-token", Redactor()), Grants(trigger=False, approvals=False))
    apps = {"full": full.streamable_http_app(host=host), "viewer": viewer.streamable_http_app(host=host)}

    def which(header: bytes) -> str | None:
        given = header.decode("latin-1")
        if not given.startswith("Bearer "):
            return None
        token = given[len("Bearer ") :].strip().encode()
        if tokens.admin is not None and hmac.compare_digest(token, tokens.admin.encode()):
            return "full"
        if tokens.viewer is not None and hmac.compare_digest(token, tokens.viewer.encode()):
            return "viewer"
        return None

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":  # both servers' session managers live as long as the process
            async with contextlib.AsyncExitStack() as stack:
                await receive()
                await stack.enter_async_context(full.session_manager.run())
                await stack.enter_async_context(viewer.session_manager.run())
                await send({"type": "lifespan.startup.complete"})
                await receive()
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        role = which(dict(scope.get("headers") or []).get(b"authorization", b""))
        if role is None:
            await _unauthorized(send)
            return
        await apps[role](scope, receive, send)

    return app


def serve_http(settings: Settings, serve: ServeSide, host: str, tokens: TokenPair, sock: Any) -> None:
    import uvicorn

    app = http_app(settings, serve, tokens, host)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    server.run(sockets=[sock])
