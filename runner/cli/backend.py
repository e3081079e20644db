"""``runner backend run SPEC -- COMMAND`` and ``runner doctor``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from runner.cli._util import echo_json, settings


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

    Example: runner backend run docker:python:3.12-slim -- python -V
    """
    import backends
    from backends.base import BackendContext

    s = settings()
    s.ensure_home()
    ctx = BackendContext(workdir=(workdir or Path.cwd()).resolve(), home=s.home, job="backend-run")
    with backends.resolve(spec, ctx=ctx) as backend:
        result = backend.run(" ".join(command), timeout=timeout)
    sys.stdout.write(result.output)
    if result.output and not result.output.endswith("\n"):
        sys.stdout.write("\n")
    if result.timed_out:
        click.echo(f"timed out after {timeout:g}s", err=True)
    sys.exit(result.exit_code)


def _check_backend(spec: Any, s: Any, workdir: Path) -> tuple[bool, str]:
    import backends
    from backends.base import BackendContext
    from runner.errors import RunnerError

    try:
        with backends.resolve(spec, ctx=BackendContext(workdir=workdir, home=s.home, job="doctor")) as b:
            result = b.run("echo ok", timeout=60)
        ok = result.exit_code == 0 and "ok" in result.output
        return ok, f"{result.duration_s * 1000:.0f} ms" if ok else f"exit {result.exit_code}: {result.output[-200:]}"
    except RunnerError as exc:
        return False, str(exc)


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True)
def doctor(as_json: bool) -> None:
    """Check config, jobs.yaml, the store and every backend the jobs use; report what works."""
    from runner.errors import RunnerError

    s = settings()
    checks: list[dict[str, Any]] = []

    def add(name: str, ok: bool, detail: str = "") -> None:
        checks.append({"check": name, "ok": ok, "detail": detail})

    try:
        cfg = s.config
        add("config", True, f"{s.config_path} ({'found' if s.config_path.exists() else 'absent: env defaults'})")
        add(
            "model",
            bool(cfg.providers),
            ", ".join(f"{n}: {p.base_url} {p.model}" for n, p in cfg.providers.items())
            or "no provider: set OPENAI_API_KEY or providers: in config.yaml",
        )
    except RunnerError as exc:
        add("config", False, str(exc))
    try:
        store = s.store
        add("store", True, f"{store.path}")
    except RunnerError as exc:
        add("store", False, str(exc))
    try:
        jobs = s.jobs
        add("jobs.yaml", True, f"{jobs.path}: {len(jobs.jobs)} jobs")
        seen: dict[Any, Any] = {}
        for job in jobs.jobs.values():
            seen.setdefault(job.spec.backend, job)  # one check per distinct spec
        for spec, job in seen.items():
            ok, detail = _check_backend(spec, s, job.workdir if job.workdir.is_dir() else Path.cwd())
            where = getattr(spec, "image", None) or getattr(spec, "host", None)
            add(f"backend {spec.type}" + (f" {where}" if where else ""), ok, detail)
    except RunnerError as exc:
        add("jobs.yaml", False, str(exc))
    uses_docker = any(c["check"].startswith("backend docker") for c in checks)
    cleaned = _cleanup_containers(s) if uses_docker else None
    if cleaned is not None:
        add("docker cleanup", True, f"removed {cleaned} stale containers")
    if as_json:
        echo_json(checks)
    else:
        for c in checks:
            click.echo(f"{'ok ' if c['ok'] else 'BAD'}  {c['check']:<28} {c['detail']}")
    if not all(c["ok"] for c in checks):
        sys.exit(1)


def _cleanup_containers(s: Any) -> int | None:
    """Remove runner-labelled containers whose run is no longer running (None: docker not in use)."""
    from runner.statuses import ACTIVE

    try:
        from backends.docker import cleanup_stale
    except ImportError:  # pragma: no cover - the docker SDK is a dependency; a broken install
        return None
    store = s.store

    def is_active(run_id: str) -> bool:
        row = store.one("SELECT status FROM runs WHERE id=?", (run_id,))
        return bool(row and row["status"] in ACTIVE)

    from runner.errors import BackendError

    try:
        return len(cleanup_stale(is_active))
    except BackendError:
        return None


COMMANDS = [backend_group, doctor]
