"""Installing the SDK: a tracer provider, its sampler, the OTLP/HTTP exporter, and the
instrumentations of the libraries the platform uses.

Called once per process by the project (`project.tracing_boot`) when an endpoint is set, and
by tests with an in-memory exporter. Nothing here runs while tracing is off.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    ParentBased,
    Sampler,
    TraceIdRatioBased,
)

from tracing.state import before_stop_run, tracer, tracer_set

logger = logging.getLogger(__name__)

INSTRUMENTATION_NAME = "scheduler"

# OTEL_TRACES_SAMPLER's names (the OpenTelemetry specification's), with OTEL_TRACES_SAMPLER_ARG
# the ratio of the ratio-based ones.
SAMPLERS = (
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
)

# What `OTEL_INSTRUMENTATIONS` may name. django by default: a span per request of the web
# tier. The others are opt-in: celery, psycopg and redis add a span per message, statement
# and Redis command on the run path, several times the run's own spans (docs/operations/
# tracing.md, "Cost"); requests would start a trace of its own for an http task's call,
# which is made on a helper thread outside the handler's span, and overwrite the
# `traceparent` header the handler sets from that span.
LIBRARIES = ("django", "requests", "celery", "psycopg", "redis")
DEFAULT_LIBRARIES = ("django",)


@dataclass(frozen=True)
class TracingConfig:
    endpoint: str = ""
    sampler: str = "parentbased_traceidratio"
    sampler_arg: float = 0.02
    service_name: str = "scheduler"
    libraries: tuple[str, ...] = DEFAULT_LIBRARIES
    export_delay_ms: int = 5000
    resource: dict[str, str] = field(default_factory=dict)


def sampler_for(name: str, ratio: float) -> Sampler:
    """The sampler OTEL_TRACES_SAMPLER names; ValueError names the setting otherwise."""
    if name not in SAMPLERS:
        raise ValueError(f"OTEL_TRACES_SAMPLER: {name!r} is not one of {', '.join(SAMPLERS)}")
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"OTEL_TRACES_SAMPLER_ARG: {ratio} is not a ratio between 0 and 1")
    root = {
        "always_on": ALWAYS_ON,
        "always_off": ALWAYS_OFF,
        "traceidratio": TraceIdRatioBased(ratio),
    }[name.removeprefix("parentbased_")]
    return ParentBased(root) if name.startswith("parentbased_") else root


def tracing_start(
    config: TracingConfig, *, exporter: SpanExporter | None = None, install_global: bool = False
) -> TracerProvider:
    """Install a provider (OTLP/HTTP to `config.endpoint`, or `exporter`, which tests give
    an in-memory one and get each span as it ends) and instrument the libraries named.
    `install_global`: also OpenTelemetry's global provider, for code that asks the API for
    a tracer (a process does so once; tests leave it alone)."""
    if exporter is None:
        # Local: the exporter (and its protobuf and HTTP stack) loads only where tracing is on.
        # The SDK's OTLP/HTTP exporter, with a cheaper encoding of the same bytes.
        from tracing.otlp_export import RunPathOTLPSpanExporter  # noqa: PLC0415

        processor = BatchSpanProcessor(
            RunPathOTLPSpanExporter(endpoint=config.endpoint.rstrip("/") + "/v1/traces"),
            schedule_delay_millis=config.export_delay_ms,
        )
    else:
        processor = SimpleSpanProcessor(exporter)
    provider = TracerProvider(
        sampler=sampler_for(config.sampler, config.sampler_arg),
        resource=_HashedOnce.of(
            Resource.create({"service.name": config.service_name, **config.resource})
        ),
    )
    provider.add_span_processor(processor)
    if install_global:
        _global_provider_offer(provider)
    _instrument(config.libraries, provider)
    tracer_set(provider.get_tracer(INSTRUMENTATION_NAME))
    return provider


class _HashedOnce(Resource):
    """The process's resource, its hash computed once: the OTLP encoder groups every span by
    its resource, and the SDK's `Resource.__hash__` serialises all its attributes to JSON
    each time (3 µs a span, five spans a run). A resource never changes once made."""

    @classmethod
    def of(cls, resource: Resource) -> _HashedOnce:
        return cls(resource.attributes, resource.schema_url)

    def __init__(self, attributes, schema_url: str | None = None) -> None:
        super().__init__(attributes, schema_url)
        self._hash = super().__hash__()

    def __hash__(self) -> int:
        return self._hash


def tracing_stop(provider: TracerProvider | None) -> None:
    """Tracing off again (tests): the hooks see no tracer, the spans held open end, what was
    buffered is flushed."""
    tracer_set(None)
    before_stop_run()
    if provider is not None:
        provider.force_flush()
        provider.shutdown()


def tracing_flush(provider: TracerProvider | None, timeout_ms: int = 2000) -> None:
    """Export what is buffered now: a process about to exit would otherwise lose its last
    batch (the processor exports every `export_delay_ms`)."""
    if provider is not None and tracer() is not None:
        provider.force_flush(timeout_ms)


def _global_provider_offer(provider: TracerProvider) -> None:
    # The global provider can be set once per process; the instrumentations are given ours
    # explicitly, so a second start (tests) only keeps the first global one.
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        trace.set_tracer_provider(provider)


def _instrument(libraries: Iterable[str], provider: TracerProvider) -> None:
    for name in libraries:
        if name not in LIBRARIES:
            raise ValueError(
                f"OTEL_INSTRUMENTATIONS: {name!r} is not one of {', '.join(LIBRARIES)}"
            )
        instrumentor = _instrumentor(name)
        if instrumentor.is_instrumented_by_opentelemetry:
            continue
        try:
            instrumentor.instrument(tracer_provider=provider)
        except Exception:  # a library's instrumentation must never stop the process
            logger.exception("could not instrument %s; its spans are missing", name)


def _instrumentor(name: str):
    # Local imports: each instrumentation loads only when named (and tracing is on).
    if name == "django":
        from opentelemetry.instrumentation.django import DjangoInstrumentor  # noqa: PLC0415

        return DjangoInstrumentor()
    if name == "requests":
        from opentelemetry.instrumentation.requests import RequestsInstrumentor  # noqa: PLC0415

        return RequestsInstrumentor()
    if name == "celery":
        from opentelemetry.instrumentation.celery import CeleryInstrumentor  # noqa: PLC0415

        return CeleryInstrumentor()
    if name == "psycopg":
        from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor  # noqa: PLC0415

        return PsycopgInstrumentor()
    from opentelemetry.instrumentation.redis import RedisInstrumentor  # noqa: PLC0415

    return RedisInstrumentor()
