"""The run path's CPU in one process, tracing off or on: what `ceiling --tracing` reports
beside the stack's step, because on a shared 2-vCPU machine the stack's figures drift more
between two runs of the same mode than tracing costs.

This process plays the beat and the worker for `runs` runs of a noop python task, in batches
of BATCH: `fires_record` (the INSERT), `ring` (the publish, to a queue nobody reads, emptied
after), `execution_batch_run` (claim, handler, finish), with the spans exported over OTLP/HTTP
to the null sink (`bench.otlp_sink`) by the SDK's batch processor. CPU is the process's own
(every thread: the export thread included), flushed before it is read. Modes alternate, each
measured `rounds` times, and the median is kept. `bench trace_instructions` runs the same
pass under callgrind and counts instructions instead, which a loaded machine does not move.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable
from datetime import timedelta

from bench import support
from bench.otlp_sink import NullOtlpSink

BATCH = 20
SAMPLERS = {"full": ("always_on", 1.0), "default": ("parentbased_traceidratio", 0.02)}


def run_path_pass(runs: int) -> Callable[[], None]:
    """A noop task and a queue nobody reads; the pass that fires, rings, claims, runs and
    finishes `runs` of its runs in batches of BATCH (the database and Redis reset first)."""
    from django.utils import timezone

    from scheduler_app.models import Tenant
    from scheduler_app.ringing.ring import ring
    from scheduler_app.services.firing import Fire, fires_record
    from scheduler_app.services.task_definitions import task_create
    from workers.runner import execution_batch_run

    support.reset()
    tenant = support.bench_tenant()
    Tenant.objects.filter(id=tenant.id).update(
        max_runs_per_hour=1_000_000_000, max_concurrent_runs=10_000
    )
    task = task_create(
        tenant=tenant,
        spec={
            "name": f"run-path-{uuid.uuid4().hex[:6]}",
            "schedule": {"type": "manual"},
            "handler": {"type": "python", "callable": "noop"},
        },
    )
    queue = f"bench-run-path-{uuid.uuid4().hex[:6]}"
    broker = support.redis()
    step = [0]

    def one_pass() -> None:
        for _ in range(runs // BATCH):
            now = timezone.now()
            fires = [
                Fire(
                    task_id=task.id,
                    tenant_id=tenant.id,
                    scheduled_at=now - timedelta(seconds=1, microseconds=step[0] + index),
                    priority=5,
                    queue=queue,
                    max_attempts=1,
                )
                for index in range(BATCH)
            ]
            step[0] += BATCH
            bells = fires_record(fires, now=now)
            ring(bells)
            execution_batch_run(
                execution_ids=[bell.execution_id for bell in bells], worker_id="bench@run-path"
            )
        broker.delete(*broker.keys(f"*{queue}*") or ["-"])

    return one_pass


def tracing_mode_start(mode: str, endpoint: str):
    """The provider of `mode` ("full" or "default"), exporting over OTLP/HTTP to `endpoint`
    with no library instrumented (the run path's own spans)."""
    from tracing.setup import TracingConfig, tracing_start

    sampler, ratio = SAMPLERS[mode]
    return tracing_start(
        TracingConfig(endpoint=endpoint, sampler=sampler, sampler_arg=ratio, libraries=())
    )


def run_path_cpu(modes: list[str], *, runs: int = 1000, rounds: int = 3) -> dict[str, float]:
    """Median CPU milliseconds per run for each mode."""
    from tracing.setup import tracing_stop

    one_pass = run_path_pass(runs)
    one_pass()  # warm: caches, prepared statements, imports
    samples: dict[str, list[float]] = {mode: [] for mode in modes}
    for _ in range(rounds):
        for mode in modes:
            sink = provider = None
            if mode != "off":
                sink = NullOtlpSink()
                provider = tracing_mode_start(mode, sink.url)
            started = time.process_time()
            one_pass()
            if provider is not None:
                tracing_stop(provider)  # flushes: the export's CPU is counted
            samples[mode].append((time.process_time() - started) / runs * 1000)
            if sink is not None:
                sink.close()
    return {mode: statistics.median(values) for mode, values in samples.items()}
