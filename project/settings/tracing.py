"""Tracing (OpenTelemetry): read here, once; `base` takes TRACING as it is and adds the log
filter while it is on. docs/operations/tracing.md explains each setting."""

from project.settings.env import env_float, env_int, env_list, env_str

# Tracing is on exactly when an endpoint is set: the OTLP/HTTP base URL of a collector
# (Jaeger all-in-one, an OpenTelemetry Collector), e.g. http://jaeger:4318; spans go to
# <endpoint>/v1/traces. Unset, no SDK provider is installed and the run path makes one check.
_ENDPOINT = env_str("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()

TRACING = {
    "ENDPOINT": _ENDPOINT,
    # The OpenTelemetry names and meanings. The default keeps one fire in fifty (its whole
    # trace: the beat's decision is followed by every process after it): a traced run costs
    # a third to a half again its CPU (five spans, encoded and sent), so 2% keeps the average
    # within the 3% budget (bench/results/ceiling-tracing.md); at 833 fires/s, 17 traces/s.
    "SAMPLER": env_str("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
    "SAMPLER_ARG": env_float("OTEL_TRACES_SAMPLER_ARG", 0.02),
    # service.name of this process's spans; by default scheduler-<role> (web, beat, worker).
    "SERVICE_NAME": env_str("OTEL_SERVICE_NAME", ""),
    # Libraries instrumented beside the run path's own spans (tracing.setup.LIBRARIES);
    # "none" for the run path's spans alone.
    "LIBRARIES": tuple(
        name for name in env_list("OTEL_INSTRUMENTATIONS", ["django"]) if name != "none"
    ),
    # How often buffered spans are exported (the SDK's BatchSpanProcessor delay).
    "EXPORT_DELAY_MS": env_int("OTEL_BSP_SCHEDULE_DELAY", 5000),
    # A trace UI's address with {trace_id} in it (Jaeger: http://localhost:16686/trace/
    # {trace_id}): the dashboard links a run's trace id there. Empty: the id alone.
    "UI_URL": env_str("OTEL_TRACE_UI_URL", ""),
}
