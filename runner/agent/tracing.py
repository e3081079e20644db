"""The tracing seam: run, model-call and tool-call spans without the run or loop code knowing
about OpenTelemetry.

``Tracer.span(name, attributes)`` is a context manager yielding a ``Span`` (``set(key, value)``);
spans opened inside it are its children (the nesting follows ``contextvars``, so a thread started
through ``contextvars.copy_context().run`` keeps its parent). ``tracer_from_env()`` returns the
no-op tracer unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set *and* the optional ``otel`` extra is
installed; only then is OpenTelemetry imported (``runner.agent.otel``). Attributes carry names,
counts and statuses, never arguments, results or prompts (they may hold secrets).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol

Attr = str | int | float | bool
ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"


class Span(Protocol):
    def set(self, key: str, value: Attr) -> None: ...


class Tracer(Protocol):
    def span(self, name: str, attributes: Mapping[str, Attr] | None = None) -> AbstractContextManager[Span]: ...

    def close(self) -> None:
        """Send what is buffered (a worker process calls this before it exits)."""
        ...


class _NoopSpan:
    def set(self, key: str, value: Attr) -> None:
        return None


class NoopTracer:
    """Tracing off: spans cost a generator and nothing else."""

    _span = _NoopSpan()

    @contextmanager
    def span(self, name: str, attributes: Mapping[str, Attr] | None = None) -> Iterator[Span]:
        yield self._span

    def close(self) -> None:
        return None


NOOP = NoopTracer()


def otel_available() -> bool:
    from importlib.util import find_spec

    try:
        return find_spec("opentelemetry.sdk") is not None and find_spec("opentelemetry.exporter.otlp") is not None
    except ModuleNotFoundError:
        return False


def tracer_from_env(environ: Mapping[str, str] | None = None, *, service: str = "runner") -> Tracer:
    """OpenTelemetry spans over OTLP/HTTP when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set and the
    ``otel`` extra is installed; else the no-op tracer (nothing imported)."""
    env = os.environ if environ is None else environ
    if not env.get(ENDPOINT_ENV) or not otel_available():
        return NOOP
    from runner.agent.otel import OtelTracer

    return OtelTracer(service)
