"""Tracing with OpenTelemetry: one trace per run, from the beat's fire to the worker's finish.

Plain Python over the OpenTelemetry API and SDK: it imports no app, nor Django or Celery, so
the core (the fire's INSERT, the ring), the worker and the DAG engine can all open their
spans through it. Off unless `tracing.setup.tracing_start` installed a provider (the
project does so when OTEL_EXPORTER_OTLP_ENDPOINT is set); while off, every hook on the run
path costs one `tracer() is None` check.
"""
