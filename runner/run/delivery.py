"""Delivering a run's output to its ``deliver:`` sinks: ``file``, ``file:PATH`` (PATH may be a
template), ``stdout`` here; webhook, Slack, Discord, Telegram and email through
``runner.delivery.send`` (retries, ``env:NAME``, signatures). A failing sink is recorded on the
run (``delivery_failed``) and alerted; it never changes the run's status."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.config.jobfile import Job
from runner.config.sinks import Sink, parse_sink
from runner.delivery.message import Message
from runner.delivery.send import Delivered, SendContext, send
from runner.silent import SILENT, is_silent
from runner.store.atomic import write_private

__all__ = ["SILENT", "Delivered", "Output", "deliver", "is_silent"]


@dataclass(frozen=True)
class Output:
    """One run's output as its sinks see it."""

    job: Job
    run_id: str
    status: str
    text: str
    path: Path | None
    variables: dict[str, Any]

    def message(self) -> Message:
        payload = {"job": self.job.name, "run_id": self.run_id, "status": self.status, "output": self.text}
        subject = f"[runner] {self.job.name}: run {self.status}"
        return Message(self.run_id, self.run_id, subject, self.text, payload)


def deliver(out: Output, ctx: SendContext, render: Callable[[str, dict[str, Any], str], str]) -> list[Delivered]:
    """Send ``out`` to each of the job's sinks, in order; ``render`` expands a ``file:PATH`` template."""
    message = out.message()
    results: list[Delivered] = []
    for item in out.job.spec.deliver:
        sink = parse_sink(item)
        if sink.kind == "file":
            results.append(_file(sink, out, ctx, render))
        elif sink.kind == "stdout":
            stream = ctx.stdout or sys.stdout
            stream.write(out.text if out.text.endswith("\n") else out.text + "\n")
            stream.flush()
            results.append(Delivered("stdout", True))
        else:
            results.append(send(sink, message, ctx))
    return results


def _file(sink: Sink, out: Output, ctx: SendContext, render: Callable[[str, dict[str, Any], str], str]) -> Delivered:
    if not sink.target:
        return Delivered("file", out.path is not None, str(out.path or "no output file"))
    try:
        rendered = render(sink.target, out.variables, f"job {out.job.name}: deliver {sink.label}")
        path = out.job.resolve_path(rendered)
        write_private(path, out.text)
    except (OSError, ValueError) as exc:
        return Delivered(sink.label, False, ctx.redactor(f"{type(exc).__name__}: {exc}"))
    return Delivered(sink.label, True, str(path))
