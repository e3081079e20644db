"""``runner backend run SPEC -- COMMAND`` and ``runner doctor``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from runner.cli import _style
from runner.cli._util import echo_json, settings
from runner.store import ledger


@click.group("backend")
def backend_group() -> None:
    """Terminal backends: local, docker:IMAGE, ssh:user@host:port."""


@backend_group.command("run")
@click.argument("spec")
@click.argument("command", nargs=-1, required=True)
@click.option("--timeout", default=300.0, show_default=True, help="seconds")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), help="local folder (default: cwd)")
def backend_run(spec: str, command: tuple[str, ...], timeout: float, workdir: Path | None) -> None:
    """Run COMMAND once in the backend SPEC, print its output, exit with its exit code.

    Several words run as that argv (quoted for the shell); a single word is a shell command line.

    Example: runner backend run docker:python:3.12-slim -- python -V
    """
    from runner import backends
    from runner.backends.base import BackendContext

    s = settings()
    s.ensure_home()
    ctx = BackendContext(workdir=(workdir or Path.cwd()).resolve(), home=s.home, job="backend-run")
    with backends.resolve(spec, ctx=ctx) as backend:
        result = backend.run(command_line(command), timeout=timeout)
    sys.stdout.write(result.output)
    if result.output and not result.output.endswith("\n"):
        sys.stdout.write("\n")
    if result.timed_out:
        click.echo(f"timed out after {timeout:g}s", err=True)
    sys.exit(result.exit_code)


def command_line(argv: tuple[str, ...]) -> str:
    """``sh -c 'echo a; echo b'`` keeps its quoting; one argument (``'ls | wc -l'``) stays a shell string."""
    import shlex

    return argv[0] if len(argv) == 1 else shlex.join(argv)


def _check_backend(spec: Any, s: Any, workdir: Path) -> tuple[bool, str]:
    from runner import backends
    from runner.backends.base import BackendContext
    from runner.errors import RunnerError

    try:
        with backends.resolve(spec, ctx=BackendContext(workdir=workdir, home=s.home, job="doctor")) as b:
            result = b.run("echo ok", timeout=60)
        ok = result.exit_code == 0 and "ok" in result.output
        return ok, f"{result.duration_s * 1000:.0f} ms" if ok else f"exit {result.exit_code}: {result.output[-200:]}"
    except RunnerError as exc:
        return False, str(exc)


@click.command("doctor")
@click.option("--deep", is_flag=True, help="also send each provider a one-token request")
@click.option("--json", "as_json", is_flag=True)
def doctor(deep: bool, as_json: bool) -> None:
    """Check config, each provider (keys set, base URL reachable, model listed), jobs.yaml, the
    store and every backend the jobs use; report what works; exit 1 if anything is broken."""
    s = settings()
    checks: list[dict[str, Any]] = []

    def add(name: str, ok: bool, detail: str = "", *, warn: bool = False) -> None:
        checks.append({"check": name, "ok": ok, "detail": detail, **({"warn": True} if warn else {})})

    jobs = _doctor_jobs(s, add)
    _doctor_config(s, add, jobs, deep=deep)
    store_ok = _doctor_store(s, add)
    if jobs is not None:
        _doctor_sandbox(add, jobs)
        _doctor_backends(s, add, jobs)
    uses_docker = any(c["check"].startswith("backend docker") for c in checks)
    cleaned = _cleanup_containers(s) if uses_docker and store_ok else None
    if cleaned is not None:
        add("docker cleanup", True, f"removed {cleaned} stale containers")
    if as_json:
        echo_json(checks)
    else:
        for c in checks:
            mark = "BAD" if not c["ok"] else "WARN" if c.get("warn") else "ok"
            _style.echo(f"{_style.status(mark, pad=4)} {c['check']:<28} {c['detail']}")
    if not all(c["ok"] for c in checks):
        sys.exit(1)


def _doctor_jobs(s: Any, add: Any) -> Any:
    """jobs.yaml loaded and checked as `runner jobs validate` does; the JobsFile, or None."""
    from datetime import UTC, datetime

    from runner.errors import RunnerError
    from runner.run.checks import check_jobs

    try:
        jobs = s.jobs
    except RunnerError as exc:
        add("jobs.yaml", False, str(exc).splitlines()[0] + (" (see: runner jobs validate)" if "\n" in str(exc) else ""))
        return None
    problems = check_jobs(jobs, s, now=datetime.now(UTC))
    if problems:
        more = f" (and {len(problems) - 1} more: runner jobs validate)" if len(problems) > 1 else ""
        add("jobs.yaml", False, problems[0] + more)
    else:
        add("jobs.yaml", True, f"{jobs.path}: {len(jobs.jobs)} jobs")
    return jobs


def _doctor_config(s: Any, add: Any, jobs: Any, *, deep: bool) -> None:
    from runner.cli._probe import probe_provider
    from runner.errors import RunnerError

    try:
        cfg = s.config
    except RunnerError as exc:
        add("config", False, str(exc))
        return
    add("config", True, s.config_origin())
    if not cfg.providers:
        add("model", False, "no provider: set OPENAI_API_KEY or providers: in config.yaml")
        return
    wanted = _models_by_provider(cfg, jobs)
    for name, provider in sorted(cfg.providers.items()):
        result = probe_provider(name, provider, wanted.get(name, set()), deep=deep)
        add(f"provider {name}", result.ok, result.detail)


def _models_by_provider(cfg: Any, jobs: Any) -> dict[str, set[str]]:
    """The models jobs ask of each provider (``provider/model`` and ``org/model`` entries)."""
    from runner.run.model_choice import split_ref

    out: dict[str, set[str]] = {}
    for job in jobs.jobs.values() if jobs is not None else []:
        if not job.spec.agent:
            continue
        for ref in job.models:
            name, model = split_ref(cfg, ref)
            if name in cfg.providers and model:
                out.setdefault(name, set()).add(model)
    return out


def _doctor_store(s: Any, add: Any) -> bool:
    """Open the store and run ``PRAGMA quick_check`` over every page; return whether it is usable."""
    from runner.errors import RunnerError
    from runner.store import WHAT_TO_DO

    try:
        store = s.store
        problems = store.quick_check()
    except RunnerError as exc:
        add("store", False, str(exc))
        return False
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        add("store", False, f"{store.path}: quick_check: {problems[0]}{more}; {WHAT_TO_DO}")
        return False
    add("store", True, f"{store.path} (quick_check ok)")
    url = s.database.url
    if url is not None and _open_to_this_machine(str(url)):
        add(
            "store access",
            True,
            "the PostgreSQL store takes connections without a password from this machine: a sandboxed run "
            "with network on could reach it (use password authentication, or sandbox: {network: false})",
            warn=True,
        )
    return True


def _open_to_this_machine(url: str) -> bool:
    """A PostgreSQL URL with no password whose server is on this machine (a socket or loopback)."""
    from urllib.parse import parse_qs, urlsplit

    parts = urlsplit(url)
    query = parse_qs(parts.query)
    host = parts.hostname or (query.get("host") or [""])[0]
    if parts.password or query.get("password"):
        return False
    return not host or host.startswith("/") or _is_this_machine(host)


def _doctor_sandbox(add: Any, jobs: Any) -> None:
    """Whether the sandbox can start here (when a job needs it), and, loudly, every agent job
    whose commands run unsandboxed as the runner's own user, with the reason."""
    from runner.backends.sandbox import problem

    sandboxed = [name for name, job in jobs.jobs.items() if job.sandboxed]
    if sandboxed:
        why = problem()
        detail = why or f"bubblewrap works: {len(sandboxed)} agent job(s) run sandboxed"
        add("sandbox", why is None, detail if why is None else f"{why}; jobs that cannot run: {', '.join(sandboxed)}")
    for name, job in sorted(jobs.jobs.items()):
        spec = job.spec
        if spec.agent and spec.backend.type == "ssh" and _is_this_machine(spec.backend.host):
            add(
                f"job {name}",
                True,
                f"ssh backend on this machine ({spec.backend.host}): the agent's commands run as that account, "
                "outside any sandbox; use a separate account or host",
                warn=True,
            )
        if spec.agent and spec.backend.type == "local" and not spec.sandbox.enabled:
            add(
                f"job {name}",
                True,
                "UNSANDBOXED (sandbox: off in jobs.yaml): the agent's commands, file tools and MCP servers run as "
                "the runner's own user and can reach RUNNER_HOME, config.yaml and the keys",
                warn=True,
            )


def _is_this_machine(host: str) -> bool:
    """Does ``host`` name this machine (loopback, or its own name)?"""
    import ipaddress
    import socket

    if host in ("localhost", socket.gethostname(), socket.getfqdn()):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _doctor_backends(s: Any, add: Any, jobs: Any) -> None:
    seen: dict[Any, Any] = {}
    for job in jobs.jobs.values():
        seen.setdefault(job.spec.backend, job)  # one check per distinct spec (the models are frozen)
    for spec, job in seen.items():
        ok, detail = _check_backend(spec, s, job.workdir if job.workdir.is_dir() else Path.cwd())
        where = getattr(spec, "image", None) or getattr(spec, "host", None)
        add(f"backend {spec.type}" + (f" {where}" if where else ""), ok, detail)


def _cleanup_containers(s: Any) -> int | None:
    """Remove runner-labelled containers whose run is no longer running (None: docker not in use)."""

    try:
        from runner.backends.docker import cleanup_stale
    except ImportError:  # pragma: no cover - the docker SDK is a dependency; a broken install
        return None
    store = s.store

    def is_active(run_id: str) -> bool:
        return ledger.is_active(store, run_id)

    from runner.errors import BackendError

    try:
        return len(cleanup_stale(is_active, home=s.home))
    except BackendError:
        return None


COMMANDS = [backend_group, doctor]
