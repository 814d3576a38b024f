"""Starting the SDK: the samplers OTEL_TRACES_SAMPLER names, a bad value refused naming its
setting, and every instrumentation the settings may name loading and recording against the
pinned Django, Celery, redis and psycopg (in a process of its own: instrumenting patches
those libraries for the whole process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

from tracing.setup import LIBRARIES, sampler_for

ROOT = Path(__file__).resolve().parents[2]


def test_the_default_sampler_follows_the_parent_and_keeps_its_ratio_of_roots():
    sampler = sampler_for("parentbased_traceidratio", 0.02)
    assert isinstance(sampler, ParentBased)
    assert "TraceIdRatioBased{0.02}" in sampler.get_description()
    assert isinstance(sampler_for("traceidratio", 0.5), TraceIdRatioBased)


@pytest.mark.parametrize(
    ("name", "ratio", "setting"),
    [("sometimes", 0.1, "OTEL_TRACES_SAMPLER"), ("traceidratio", 1.5, "OTEL_TRACES_SAMPLER_ARG")],
)
def test_a_bad_sampler_setting_is_refused_by_name(name, ratio, setting):
    with pytest.raises(ValueError, match=setting):
        sampler_for(name, ratio)


SCRIPT = """
import json, django
django.setup()
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tracing.setup import TracingConfig, tracing_start
from tracing.state import tracer
exporter = InMemorySpanExporter()
tracing_start(TracingConfig(sampler="always_on", libraries=LIBRARIES), exporter=exporter)
from django.db import connection
from scheduler_app.redis_client import get_redis
with tracer().start_as_current_span("probe"):
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    get_redis().ping()
print(json.dumps(sorted({span.name for span in exporter.get_finished_spans()})))
"""


def test_every_instrumentation_loads_and_records_with_the_pinned_libraries():
    done = subprocess.run(
        [sys.executable, "-c", f"LIBRARIES = {LIBRARIES!r}\n" + SCRIPT],
        cwd=ROOT,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "project.settings.test",
            "PYTHONPATH": str(ROOT),
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    names = json.loads(done.stdout.strip().splitlines()[-1])
    assert "probe" in names
    assert "SELECT" in names  # psycopg's span of the statement
    assert "PING" in names  # redis's span of the command
