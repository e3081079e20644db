"""OpenTelemetry spans of a real `runner run-job`, exported over OTLP/HTTP to a real receiver (an
HTTP server in the test accepting ``POST /v1/traces`` protobuf, decoded with opentelemetry-proto):
the span tree run > model call, tool call, and no secret in any attribute. Without the endpoint
nothing of OpenTelemetry is imported (tests/cli/test_import_budget.py checks a run-job too)."""

from __future__ import annotations

import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from runner.testing import call, final

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed (pip install -e '.[otel]')")
trace_service = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")

SECRET = "sk-test-key-0123456789abcdef"  # the project's API key (tests/conftest.py)


class OtlpReceiver:
    """A tiny OTLP/HTTP collector: every ``POST /v1/traces`` body decoded into spans."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.paths: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.paths.append(self.path)
                if self.path == "/v1/traces" and self.headers.get("Content-Type") == "application/x-protobuf":
                    request = trace_service.ExportTraceServiceRequest()
                    request.ParseFromString(body)
                    for resource in request.resource_spans:
                        for scope in resource.scope_spans:
                            outer.spans.extend(scope.spans)
                answer = trace_service.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> OtlpReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _attrs(span: Any) -> dict[str, Any]:
    out = {}
    for kv in span.attributes:
        value = kv.value
        out[kv.key] = getattr(value, value.WhichOneof("value")) if value.WhichOneof("value") else None
    return out


def test_run_job_exports_run_model_and_tool_spans(project, fake):
    project.write_jobs("jobs:\n  traced:\n    prompt: go\n    approvals: deny\n")
    fake.add(call("terminal", {"command": f"echo {SECRET}"}), final(f"done, key was {SECRET}"))
    with OtlpReceiver() as receiver:
        env = project.env(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url)
        res = subprocess.run(
            [sys.executable, "-m", "runner", "run-job", "traced"],
            env=env,
            cwd=project.root,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert res.returncode == 0, res.stderr
    assert receiver.paths and set(receiver.paths) == {"/v1/traces"}
    by_name: dict[str, list[Any]] = {}
    for span in receiver.spans:
        by_name.setdefault(span.name, []).append(span)
    assert sorted(by_name) == ["model call", "run", "tool call"]
    (run,) = by_name["run"]
    assert run.parent_span_id == b""
    assert len(by_name["model call"]) == 2 and len(by_name["tool call"]) == 1
    for child in by_name["model call"] + by_name["tool call"]:
        assert child.parent_span_id == run.span_id and child.trace_id == run.trace_id
        assert (
            run.start_time_unix_nano <= child.start_time_unix_nano <= child.end_time_unix_nano <= run.end_time_unix_nano
        )
    run_attrs = _attrs(run)
    assert run_attrs["runner.job"] == "traced" and run_attrs["runner.status"] == "succeeded"
    assert _attrs(by_name["tool call"][0])["runner.tool"] == "terminal"
    assert _attrs(by_name["model call"][0])["gen_ai.usage.input_tokens"] == 100
    for span in receiver.spans:
        for value in _attrs(span).values():
            assert SECRET not in str(value), (span.name, value)


def test_no_endpoint_no_spans_and_no_import(project, fake):
    """The seam without the endpoint is the no-op tracer, and OpenTelemetry stays unimported."""
    code = (
        "import sys, os; os.environ.pop('OTEL_EXPORTER_OTLP_ENDPOINT', None)\n"
        "from runner.agent.tracing import tracer_from_env, NOOP\n"
        "t = tracer_from_env()\n"
        "with t.span('x', {'a': 1}) as s: s.set('b', 2)\n"
        "print(t is NOOP, any(m.startswith('opentelemetry') for m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=project.env(), capture_output=True, text=True, timeout=30)
    assert out.stdout.split() == ["True", "False"], out.stderr
