"""Delivering a run's output to its ``deliver:`` sinks: ``file``, ``file:PATH`` (PATH may be a
template), ``stdout`` here; webhook, Slack, Discord, Telegram and email through
``runner.delivery.send`` (retries, ``env:NAME``, signatures). A failing sink is recorded on the
run (``delivery_failed``) and alerted; it never changes the run's status."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

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
    key: str = ""  # the idempotency key of the delivery step (``RUN:deliver``; the same in every attempt)

    def message(self, sink: int) -> Message:
        payload = {"job": self.job.name, "run_id": self.run_id, "status": self.status, "output": self.text}
        subject = f"[runner] {self.job.name}: run {self.status}"
        return Message(self.run_id, self.sink_key(sink), subject, self.text, payload)

    def sink_key(self, sink: int) -> str:
        """The idempotency key of the delivery to sink ``sink`` (from 1): ``RUN:deliver:N``."""
        return f"{self.key or f'{self.run_id}:deliver'}:{sink}"


class Done(Protocol):
    """The deliveries done under a key (``runner.store.journal``): a resumed run skips them."""

    def __call__(self, key: str) -> bool: ...


def deliver(
    out: Output,
    ctx: SendContext,
    render: Callable[[str, dict[str, Any], str], str],
    *,
    done: Done | None = None,
    mark: Callable[[str, str], None] | None = None,
) -> list[Delivered]:
    """Send ``out`` to each of the job's sinks, in order; ``render`` expands a ``file:PATH`` template.
    A sink whose key ``done`` knows (an earlier attempt of the run delivered to it) is skipped;
    each sink delivered is given to ``mark`` (key, sink label)."""
    results: list[Delivered] = []
    for i, item in enumerate(out.job.spec.deliver, 1):
        sink = parse_sink(item)
        key = out.sink_key(i)
        if done is not None and done(key):
            results.append(Delivered(sink.label, True, f"delivered already by an earlier attempt (key {key})"))
            continue
        result = _one(sink, out, out.message(i), ctx, render)
        if result.ok and mark is not None:
            mark(key, result.sink)
        results.append(result)
    return results


def _one(
    sink: Sink, out: Output, message: Message, ctx: SendContext, render: Callable[[str, dict[str, Any], str], str]
) -> Delivered:
    if sink.kind == "file":
        return _file(sink, out, ctx, render)
    if sink.kind == "stdout":
        stream = ctx.stdout or sys.stdout
        stream.write(out.text if out.text.endswith("\n") else out.text + "\n")
        stream.flush()
        return Delivered("stdout", True)
    return send(sink, message, ctx)


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
