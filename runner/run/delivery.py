"""Delivery sinks for a run's output: ``file``, ``file:PATH`` (PATH may be a template), ``stdout``,
``webhook:URL``. A failing sink is recorded on the run; it never fails the run."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from runner.atomic import write_private
from runner.config.jobs import Job

SILENT = "[SILENT]"
WEBHOOK_TIMEOUT = 10.0


@dataclass(frozen=True)
class Delivered:
    sink: str
    ok: bool
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"sink": self.sink, "ok": self.ok, "detail": self.detail}


def is_silent(output: str) -> bool:
    return output.strip() == SILENT


def deliver(
    job: Job,
    *,
    run_id: str,
    status: str,
    output: str,
    output_path: Path | None,
    variables: dict[str, Any],
    redact: Callable[[str], str],
    stdout: TextIO | None = None,
) -> list[Delivered]:
    what = _Run(job, run_id, status, output, output_path, variables, stdout)
    results: list[Delivered] = []
    for sink in job.spec.deliver:
        try:
            results.append(_one(sink, what))
        except Exception as exc:  # recorded on the run, by design never fatal
            results.append(Delivered(sink, False, redact(f"{type(exc).__name__}: {exc}")))
    return results


@dataclass(frozen=True)
class _Run:
    job: Job
    run_id: str
    status: str
    output: str
    output_path: Path | None
    variables: dict[str, Any]
    stdout: TextIO | None


def _one(sink: str, r: _Run) -> Delivered:
    job, output, output_path = r.job, r.output, r.output_path
    if sink == "file":
        return Delivered(sink, output_path is not None, str(output_path or "no output file"))
    if sink == "stdout":
        stream = r.stdout or sys.stdout
        stream.write(output if output.endswith("\n") else output + "\n")
        stream.flush()
        return Delivered(sink, True)
    kind, _, target = sink.partition(":")
    if kind == "file":
        from runner.run.prompt import render

        rendered = render(target, r.variables, name=f"job {job.name}: deliver {sink}", base=job.base_dir)
        path = job.resolve_path(rendered)
        write_private(path, output)
        return Delivered(sink, True, str(path))
    if kind == "webhook":
        import httpx

        payload = {"job": job.name, "run_id": r.run_id, "status": r.status, "output": output}
        response = httpx.post(target, json=payload, timeout=WEBHOOK_TIMEOUT)
        ok = 200 <= response.status_code < 300
        return Delivered(_mask_url(sink), ok, f"HTTP {response.status_code}")
    return Delivered(sink, False, "unknown sink")


def _mask_url(sink: str) -> str:
    base, _, _query = sink.partition("?")
    return base + ("?..." if _query else "")
