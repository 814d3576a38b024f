"""The exporter's own encoding (`tracing.otlp_export`): the bytes of the SDK's encoder, byte
for byte, for the spans the run path makes and for the shapes it leaves to the SDK (links,
lists as values, an integer past 64 bits), and sent over OTLP/HTTP as the SDK's exporter
sends them."""

from __future__ import annotations

import importlib.metadata
import logging
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    StatusCode,
    TraceFlags,
    TraceState,
    set_span_in_context,
)

from tracing.context import parent_context
from tracing.otlp_export import RunPathOTLPSpanExporter, spans_encoded


def _spans():
    """Spans of two processes (resources) and two scopes: a fire and its run as the run path
    makes them, and the odd shapes an instrumentation might make."""
    kept = InMemorySpanExporter()
    for service in ("beat", "worker"):
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        provider.add_span_processor(SimpleSpanProcessor(kept))
        ours = provider.get_tracer("scheduler")
        other = provider.get_tracer("opentelemetry.instrumentation.x", "1.2", schema_url="s://x")
        fire = ours.start_span("scheduler.fire", context=Context())
        fire.set_attributes({"scheduler.task.id": "1b9d6bcd", "scheduler.execution.id": "é✓"})
        fire.set_attribute("long", "x" * 300)  # lengths past one varint byte
        fire.add_event("scheduler.ring.started")
        fire.end()
        stored = f"00-{fire.get_span_context().trace_id:032x}-{0xABCD:016x}-01"
        run = ours.start_span(
            "worker.run",
            context=parent_context(stored),  # a remote parent: its flags say so
            attributes={"scheduler.attempt": 2, "scheduler.handler.type": "python"},
        )
        run.add_event("scheduler.handler.started", {"n": -3, "ok": False, "ratio": 0.0})
        run.set_status(StatusCode.ERROR, "boom: ünïcode")
        run.end()
        odd = other.start_span("odd", kind=SpanKind.CLIENT, links=[Link(fire.get_span_context())])
        odd.set_attributes({"list": ["a", "b"], "huge": 1 << 70, "empty": ""})
        odd.end()
        unnamed = other.start_span("", kind=SpanKind.SERVER)
        unnamed.set_status(StatusCode.OK)
        unnamed.end()
        other.start_span("listed", attributes={"ints": [1, 2]}).end()
    (traced,) = [s for s in kept.get_finished_spans() if s.name == "worker.run"][:1]
    assert traced.parent.is_remote
    return list(kept.get_finished_spans())


def test_the_encoding_is_the_sdks_byte_for_byte():
    spans = _spans()
    assert spans_encoded(spans) == encode_spans(spans).SerializePartialToString()
    for span in spans:  # one at a time too: each shape on its own
        assert spans_encoded([span]) == encode_spans([span]).SerializePartialToString()
    assert spans_encoded([]) == encode_spans([]).SerializePartialToString() == b""


def test_a_trace_state_is_encoded_as_the_sdks():
    provider = TracerProvider()
    kept = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(kept))
    remote = SpanContext(
        0xA1,
        0xB2,
        is_remote=True,
        trace_flags=TraceFlags(1),
        trace_state=TraceState([("vendor", "v1"), ("x", "y")]),
    )
    parent = set_span_in_context(NonRecordingSpan(remote))
    provider.get_tracer("t").start_span("s", context=parent).end()
    spans = kept.get_finished_spans()
    assert spans_encoded(spans) == encode_spans(spans).SerializePartialToString()


class _Receiver:
    def __init__(self, status: int = 200) -> None:
        self.requests: list[bytes] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                receiver.requests.append(self.rfile.read(int(self.headers["Content-Length"])))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_the_exporter_sends_the_request_a_collector_decodes():
    spans = _spans()
    receiver = _Receiver()
    exporter = RunPathOTLPSpanExporter(endpoint=receiver.url)
    try:
        assert exporter.export(spans) == SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
        receiver.close()
    (body,) = receiver.requests
    assert ExportTraceServiceRequest.FromString(body) == encode_spans(spans)


def test_a_collector_refusing_the_export_is_a_failure():
    receiver = _Receiver(status=400)  # not retried: a client error
    exporter = RunPathOTLPSpanExporter(endpoint=receiver.url)
    try:
        assert exporter.export(_spans()) == SpanExportResult.FAILURE
    finally:
        exporter.shutdown()
        receiver.close()


# The packages whose private parts `tracing.otlp_export` uses (the SDK's encoder functions,
# the exporter's client, metrics and size limit).
_READ_INTO = (
    "opentelemetry-sdk",
    "opentelemetry-proto",
    "opentelemetry-exporter-otlp-proto-http",
    "opentelemetry-exporter-otlp-proto-common",
    "opentelemetry-exporter-otlp-common",
    "opentelemetry-exporter-http-transport",
)


def test_the_installed_exporter_is_the_pinned_one_and_takes_this_encoding(caplog):
    requirements = (Path(__file__).resolve().parents[2] / "requirements.txt").read_text()
    pins = dict(re.findall(r"^([\w.-]+)==(\S+)", requirements, re.MULTILINE))
    for name in _READ_INTO:
        assert importlib.metadata.version(name) == pins[name], name
    spans = _spans()
    receiver = _Receiver()
    exporter = RunPathOTLPSpanExporter(endpoint=receiver.url)
    try:
        with caplog.at_level(logging.WARNING, logger="tracing.otlp_export"):
            assert exporter.export(spans) == SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
        receiver.close()
    # Its internals are where this encoder sends through: no fall back to the SDK's export.
    assert not getattr(exporter, "_said_fallback", False)
    assert "internals changed" not in caplog.text
    assert receiver.requests == [spans_encoded(spans)]
