"""OpenTelemetry behind ``runner.agent.tracing.Tracer``: spans exported over OTLP/HTTP (protobuf) to
``OTEL_EXPORTER_OTLP_ENDPOINT`` (the exporter reads the standard ``OTEL_*`` variables: headers,
timeout, ``OTEL_SERVICE_NAME``). Imported only by ``runner.agent.tracing.tracer_from_env`` when the
endpoint is set and the ``otel`` extra (opentelemetry-sdk, opentelemetry-exporter-otlp-proto-http)
is installed. It does not import ``runner.agent.tracing`` (whose ``Tracer`` protocol it fits)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span as OtelSpan
from opentelemetry.trace import Status, StatusCode

from runner import __version__


class _Span:
    def __init__(self, span: OtelSpan):
        self._span = span

    def set(self, key: str, value: Any) -> None:
        self._span.set_attribute(key, value)


class OtelTracer:
    """A tracer provider of its own (not the global one), so a test or a second tracer in the same
    process does not inherit this one; ``close()`` flushes and shuts it down."""

    def __init__(self, service: str):
        import os

        name = os.environ.get("OTEL_SERVICE_NAME") or service
        self._provider = TracerProvider(
            resource=Resource.create({"service.name": name, "service.version": __version__})
        )
        self._provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        self._tracer = self._provider.get_tracer("runner")

    @contextmanager
    def span(self, name: str, attributes: Mapping[str, Any] | None = None) -> Iterator[_Span]:
        with self._tracer.start_as_current_span(
            name, attributes=dict(attributes or {}), record_exception=False, set_status_on_exception=False
        ) as span:
            try:
                yield _Span(span)
            except BaseException as exc:
                span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
                raise

    def close(self) -> None:
        self._provider.shutdown()
