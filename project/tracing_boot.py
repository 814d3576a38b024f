"""Tracing switched on for this process when OTEL_EXPORTER_OTLP_ENDPOINT is set (from
`ProjectConfig.ready`, before the web tier loads its middleware and before the worker forks
its pool: the SDK's export thread restarts in each child by itself)."""

from __future__ import annotations

import os
import sys

from celery.signals import after_setup_logger, after_setup_task_logger, worker_process_shutdown
from django.conf import settings

from tracing.logs import trace_ids_filter_install, trace_ids_on_records
from tracing.setup import TracingConfig, tracing_flush, tracing_start

_provider = None


def process_role(argv: list[str] | None = None) -> str:
    """beat, worker or web: the default service.name's suffix, read from the command."""
    words = set(argv if argv is not None else sys.argv)
    for role in ("beat", "worker", "flower"):
        if role in words:
            return role
    return "web"


def tracing_boot() -> None:
    global _provider  # once per process
    config = settings.TRACING
    if not config["ENDPOINT"] or _provider is not None:
        return
    role = process_role()
    trace_ids_on_records()  # for the formats that name them (project.settings.base)
    _provider = tracing_start(
        TracingConfig(
            endpoint=config["ENDPOINT"],
            sampler=config["SAMPLER"],
            sampler_arg=config["SAMPLER_ARG"],
            service_name=config["SERVICE_NAME"] or f"scheduler-{role}",
            libraries=config["LIBRARIES"],
            export_delay_ms=config["EXPORT_DELAY_MS"],
            resource={"process.role": role, "host.name": os.uname().nodename},
        ),
        install_global=True,
    )


@worker_process_shutdown.connect
def _flush_before_exit(**kwargs) -> None:
    """A prefork child leaves with os._exit, past the SDK's atexit flush: export its last
    spans first."""
    tracing_flush(_provider)


@after_setup_logger.connect
@after_setup_task_logger.connect
def _trace_ids_on_celery_handlers(logger=None, **kwargs) -> None:
    """Celery's worker and beat replace the root logger's handlers with their own (and the
    task logger has its own): the worker's and the beat's lines name the trace and span
    they were written in (CELERY_WORKER_LOG_FORMAT, while tracing is on)."""
    if settings.TRACING["ENDPOINT"] and logger is not None:
        trace_ids_filter_install(logger)
