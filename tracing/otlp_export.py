"""The OTLP/HTTP span exporter with a cheaper encoding of the spans the run path makes.

The SDK's exporter encodes a batch by building a protobuf message object for every span,
attribute, value and event (`encode_spans`), then serialising it: about 20 µs a span and
3 µs an event in this process's Python, the largest share of what a traced run costs (the
export thread of every worker and of the beat does it for every span). Writing the same
protobuf wire format straight into bytes costs about half. The bytes are the SDK's to the
byte (`tests/tracing/test_otlp_export.py` compares them over every shape we make), and any
span this encoder does not know how to write (links, a list or a mapping as a value, an
integer past 64 bits) is encoded by the SDK's own function, in the same request. The
sending (the HTTP session, retries, compression, the size limit, the exporter's metrics)
stays the SDK's exporter's: only the step that turns spans into bytes is replaced.
"""

from __future__ import annotations

import logging
import struct
from collections import defaultdict
from collections.abc import Mapping, Sequence

from opentelemetry.exporter.otlp.proto.common._internal import (
    _encode_instrumentation_scope,
    _encode_resource,
)
from opentelemetry.exporter.otlp.proto.common._internal.trace_encoder import _encode_span
from opentelemetry.exporter.otlp.proto.http._common import _is_request_too_large
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.semconv.attributes.http_attributes import HTTP_RESPONSE_STATUS_CODE
from opentelemetry.trace import SpanKind

logger = logging.getLogger(__name__)

_FIXED64 = struct.Struct("<Q").pack
_DOUBLE = struct.Struct("<d").pack
_FIXED32 = struct.Struct("<I").pack
_INT64 = range(-(1 << 63), 1 << 63)


class _Unsupported(Exception):
    """A span this encoder leaves to the SDK's."""


def _varint(number: int) -> bytes:
    if number < 0x80:
        return _SMALL[number]
    out = bytearray()
    while number >= 0x80:
        out.append((number & 0x7F) | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


_SMALL = [bytes((number,)) for number in range(0x80)]


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field (a string, bytes, an embedded message)."""
    size = len(payload)
    return tag + (_SMALL[size] if size < 0x80 else _varint(size)) + payload


def _text(tag: bytes, text: str) -> bytes:
    """A plain string field: proto3 leaves out an empty one."""
    return _field(tag, text.encode()) if text else b""


class _Constants(dict):
    """The encoded field of each string the spans repeat (attribute keys, span and event
    names: the code's constants), made once. Bounded: past `LIMIT` strings (names an
    instrumentation made up per request, say) the rest are encoded each time."""

    LIMIT = 4096

    def __init__(self, tag: bytes) -> None:
        super().__init__()
        self.tag = tag

    def __missing__(self, text: str) -> bytes:
        encoded = _text(self.tag, text)
        if len(self) < self.LIMIT:
            self[text] = encoded
        return encoded


_KEYS = _Constants(b"\x0a")  # KeyValue.key
_SPAN_NAMES = _Constants(b"\x2a")  # Span.name
_EVENT_NAMES = _Constants(b"\x12")  # Span.Event.name
_KIND = {
    kind: b"\x30" + _varint(number)
    for kind, number in (
        (SpanKind.INTERNAL, 1),
        (SpanKind.SERVER, 2),
        (SpanKind.CLIENT, 3),
        (SpanKind.PRODUCER, 4),
        (SpanKind.CONSUMER, 5),
    )
}
_STATUS_UNSET = _field(b"\x7a", b"")
# Span.flags: the parent's "is remote" is known (always), and set when it is remote.
_FLAGS_LOCAL = b"\x85\x01" + _FIXED32(0x100)
_FLAGS_REMOTE = b"\x85\x01" + _FIXED32(0x300)


def _any_value(value: object) -> bytes:
    # AnyValue's fields are a oneof: written even when they hold the type's default.
    if type(value) is str:  # the common case first (a bool is an int, never a str)
        return _field(b"\x0a", value.encode())  # type: ignore[union-attr]
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, str):
        return _field(b"\x0a", value.encode())
    if isinstance(value, int):
        if value not in _INT64:
            raise _Unsupported  # the SDK refuses it (and says so)
        return b"\x18" + _varint(value if value >= 0 else value + (1 << 64))
    if isinstance(value, float):
        return b"\x21" + _DOUBLE(value)
    raise _Unsupported  # bytes, lists, mappings: rare, the SDK's


def _attributes(tag: bytes, attributes: Mapping[str, object]) -> bytes:
    keys = _KEYS
    return b"".join(
        [
            _field(tag, keys[key] + _field(b"\x12", _any_value(value)))
            for key, value in attributes.items()
        ]
    )


def _span(span: ReadableSpan) -> bytes:
    """One Span message (opentelemetry/proto/trace/v1/trace.proto), fields in number order."""
    if span.links:
        raise _Unsupported
    context = span.get_span_context()
    parts = [
        b"\x0a\x10" + context.trace_id.to_bytes(16, "big"),
        b"\x12\x08" + context.span_id.to_bytes(8, "big"),
    ]
    if context.trace_state:
        parts.append(_text(b"\x1a", ",".join(f"{k}={v}" for k, v in context.trace_state.items())))
    parent = span.parent
    if parent:
        parts.append(b"\x22\x08" + parent.span_id.to_bytes(8, "big"))
    parts.append(_SPAN_NAMES[span.name])
    parts.append(_KIND[span.kind])
    if span.start_time:
        parts.append(b"\x39" + _FIXED64(span.start_time))
    if span.end_time:
        parts.append(b"\x41" + _FIXED64(span.end_time))
    attributes = span.attributes
    if attributes:
        parts.append(_attributes(b"\x4a", attributes))
    if span.dropped_attributes:
        parts.append(b"\x50" + _varint(span.dropped_attributes))
    for event in span.events:
        encoded = (b"\x09" + _FIXED64(event.timestamp) if event.timestamp else b"") + (
            _EVENT_NAMES[event.name]
        )
        if event.attributes:
            encoded += _attributes(b"\x1a", event.attributes)
        if event.dropped_attributes:
            encoded += b"\x20" + _varint(event.dropped_attributes)
        parts.append(_field(b"\x5a", encoded))
    if span.dropped_events:
        parts.append(b"\x60" + _varint(span.dropped_events))
    if span.dropped_links:
        parts.append(b"\x70" + _varint(span.dropped_links))
    status = span.status
    if status is not None:
        code = status.status_code.value
        if code or status.description:
            parts.append(
                _field(
                    b"\x7a",
                    _text(b"\x12", status.description or "")
                    + (b"\x18" + _varint(code) if code else b""),
                )
            )
        else:
            parts.append(_STATUS_UNSET)
    parts.append(_FLAGS_REMOTE if parent is not None and parent.is_remote else _FLAGS_LOCAL)
    return b"".join(parts)


def _span_or_sdks(span: ReadableSpan) -> bytes:
    try:
        return _span(span)
    except Exception:  # anything unexpected: the SDK's encoding of this span, in place
        return _encode_span(span).SerializePartialToString()


def spans_encoded(spans: Sequence[ReadableSpan]) -> bytes:
    """An ExportTraceServiceRequest of `spans`, grouped by resource and then by
    instrumentation scope as the SDK's `encode_spans` groups them, byte for byte."""
    grouped: dict = defaultdict(lambda: defaultdict(list))
    for span in spans:
        grouped[span.resource][span.instrumentation_scope or None].append(_span_or_sdks(span))
    request = []
    for resource, scopes in grouped.items():
        scope_spans = b"".join(
            _field(
                b"\x12",
                _field(b"\x0a", _encode_instrumentation_scope(scope).SerializePartialToString())
                + b"".join(_field(b"\x12", encoded) for encoded in encoded_spans)
                + _text(b"\x1a", (scope.schema_url if scope else None) or ""),
            )
            for scope, encoded_spans in scopes.items()
        )
        request.append(
            _field(
                b"\x0a",
                _field(b"\x0a", _encode_resource(resource).SerializePartialToString())
                + scope_spans
                + _text(b"\x1a", resource.schema_url or ""),
            )
        )
    return b"".join(request)


class RunPathOTLPSpanExporter(OTLPSpanExporter):
    """The SDK's OTLP/HTTP exporter, its spans encoded by `spans_encoded`. Should the SDK's
    internals it sends through change (a version not pinned in requirements.txt), it falls
    back to the SDK's whole export, once said in the log."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        sending = getattr(self, "_client", None), getattr(self, "_metrics", None)
        if self._shutdown or None in sending or not hasattr(self, "_max_request_size"):
            if not self._shutdown and not getattr(self, "_said_fallback", False):
                self._said_fallback = True
                logger.warning("OTLP exporter internals changed: the SDK's encoding is used")
            return super().export(spans)
        try:
            data = spans_encoded(spans)
        except Exception:  # the SDK's encoding, and its own error handling
            return super().export(spans)
        if _is_request_too_large(data, self._max_request_size):
            return super().export(spans)  # the SDK drops it, saying why
        client, metrics = sending
        with metrics.export_operation(len(spans)) as result:
            sent = client.export(data)
            if not sent.success:
                result.error = sent.error
                if sent.status_code is not None:
                    result.error_attrs = {HTTP_RESPONSE_STATUS_CODE: sent.status_code}
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS
