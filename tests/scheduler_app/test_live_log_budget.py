"""The live-log budget, against the real live-log Redis (a db of its own, apart from the
broker's): per run, per tenant, the note that says a tail was cut, the end of a tail, and a
count that is never below what Redis really holds."""

from __future__ import annotations

import time
import uuid

import pytest
from django.conf import settings

from scheduler_app.live_logs import (
    CUT,
    END,
    LINE,
    LiveLogStream,
    live_log_bytes_counted,
    live_logs_redis,
    log_stream_key,
)
from workers.live_logs import LiveLogSink, live_tails_close

RUN_MAX = 64 * 1024
TENANT_MAX = 160 * 1024


@pytest.fixture
def budgets(settings):
    settings.LIVE_LOGS = {
        "RUN_MAX_BYTES": RUN_MAX,
        "TENANT_MAX_BYTES": TENANT_MAX,
        "ENDED_TTL_SECONDS": 15,
    }
    streams: list[str] = []
    yield streams
    live_logs_redis().delete(*streams) if streams else None


def _stream(budgets: list[str], tenant: str) -> LiveLogStream:
    stream = LiveLogStream(execution_id=uuid.uuid4().hex, tenant_id=tenant)
    budgets.append(stream.key)
    return stream


def _memory(*keys: str) -> int:
    return sum(int(live_logs_redis().memory_usage(key, samples=0) or 0) for key in keys)


def _fields(key: str) -> list[dict[str, str]]:
    return [fields for _id, fields in live_logs_redis().xrange(key)]


def test_the_live_log_redis_is_not_the_brokers():
    assert settings.LIVE_LOGS_REDIS_URL != settings.REDIS_URL
    assert settings.LIVE_LOGS_REDIS_URL != settings.CELERY_BROKER_URL


def test_a_run_past_its_budget_is_cut_with_a_note_and_sends_nothing_more(budgets):
    tenant = uuid.uuid4().hex
    stream = _stream(budgets, tenant)
    line = "x" * 1000
    appended = stream.append([(LINE, line)] * 200)  # 200 kB of text against 64 KiB
    assert appended.cut and 0 < appended.admitted < 200
    fields = _fields(stream.key)
    assert fields[-1] == {CUT: fields[-1][CUT]}
    assert "this run's live-log budget of 65536 bytes is spent" in fields[-1][CUT]
    assert "stored log" in fields[-1][CUT]
    assert [f[LINE] for f in fields[:-1]] == [line] * appended.admitted
    # Nothing more goes in, not even another note.
    assert stream.append([(LINE, "more")]) == type(appended)(admitted=0, cut=True)
    assert len(_fields(stream.key)) == appended.admitted + 1
    assert _memory(stream.key) <= live_log_bytes_counted(tenant_id=tenant) <= RUN_MAX


def test_a_tenants_runs_share_its_budget_and_another_tenant_keeps_its_own(budgets):
    tenant, other = uuid.uuid4().hex, uuid.uuid4().hex
    line = "y" * 2043  # the line length Redis packs worst (two do not fit one node)
    runs = [_stream(budgets, tenant) for _ in range(4)]
    outcomes = [run.append([(LINE, line)] * 40) for run in runs]
    # The first two fill their own budgets; the third meets the tenant's; the fourth finds
    # no room left for a tail at all (no stream is created).
    assert [o.cut for o in outcomes] == [True, True, True, True]
    notes = [_fields(run.key)[-1].get(CUT, "") for run in runs[:3]]
    assert "this run's" in notes[0] and "this run's" in notes[1]
    assert "this tenant's live-log budget of 163840 bytes" in notes[2]
    assert outcomes[3].admitted == 0 and not live_logs_redis().exists(runs[3].key)
    counted = live_log_bytes_counted(tenant_id=tenant)
    assert _memory(*(run.key for run in runs)) <= counted <= TENANT_MAX
    # Another tenant's tail is untouched by the first one's flood.
    theirs = _stream(budgets, other)
    assert theirs.append([(LINE, "hello")]) == type(outcomes[0])(admitted=1, cut=False)


def test_an_ended_tail_says_end_expires_soon_and_stops_counting_once_gone(budgets):
    tenant = uuid.uuid4().hex
    sink = LiveLogSink(execution_id=uuid.uuid4().hex, tenant_id=tenant, max_bytes=1 << 20)
    budgets.append(sink.stream.key)
    sink.write("stdout", "one")
    sink.flush()
    sink.write("stdout", "two")  # still pending when the run ends
    live_tails_close([(sink, "success")])
    fields = _fields(sink.stream.key)
    assert [f.get(END) for f in fields] == [None, None, "success"]
    assert fields[1][LINE].endswith("[stdout] two")
    ttl = live_logs_redis().ttl(sink.stream.key)
    assert 0 < ttl <= settings.LIVE_LOGS["ENDED_TTL_SECONDS"]
    assert live_log_bytes_counted(tenant_id=tenant) > 0
    # Once its lease (the ended TTL) is over, the tenant's next write uncounts it.
    later = _stream(budgets, tenant)
    later.append([(LINE, "x")], now=time.time() + settings.LIVE_LOGS["ENDED_TTL_SECONDS"] + 1)
    assert live_log_bytes_counted(tenant_id=tenant) == int(
        live_logs_redis().hget(later._tenant_keys[0], later.execution_id)
    )


def test_a_run_that_wrote_nothing_leaves_no_stream(budgets):
    sink = LiveLogSink(execution_id=uuid.uuid4().hex, tenant_id="t", max_bytes=1 << 20)
    live_tails_close([(sink, "success")])
    assert not live_logs_redis().exists(log_stream_key(sink.stream.execution_id))


def test_the_watchers_flush_sends_every_runs_tail_in_one_round_trip_in_order(budgets, monkeypatch):
    """Runs in progress flushed together: one pipeline for all, each stream its own lines in
    order (a chatty one's past a batch sent after), a cut tail sends nothing more."""
    import workers.live_logs as live_logs_module
    from workers.live_logs import live_tails_flush

    monkeypatch.setattr(live_logs_module, "BATCH_LINES", 3)
    tenant = uuid.uuid4().hex
    sinks = [
        LiveLogSink(execution_id=uuid.uuid4().hex, tenant_id=tenant, max_bytes=1 << 20)
        for _ in range(3)
    ]
    budgets.extend(sink.stream.key for sink in sinks)
    quiet, chatty, cut = sinks
    quiet.write("stdout", "q1")
    for k in range(5):
        chatty.write("stdout", f"c{k}")
    cut.write("stdout", "never")
    cut.cut = True
    pipelines: list[int] = []
    client = live_logs_redis()  # the process's one client, which the flush takes
    pipeline = client.pipeline

    def counted(*args, **kwargs):
        pipelines.append(1)
        return pipeline(*args, **kwargs)

    monkeypatch.setattr(client, "pipeline", counted)
    live_tails_flush(sinks)
    assert len(pipelines) == 1  # the chatty run's rest went with its own append
    assert [f[LINE].rsplit(" ", 1)[-1] for f in _fields(quiet.stream.key)] == ["q1"]
    chatty_lines = [f[LINE].rsplit(" ", 1)[-1] for f in _fields(chatty.stream.key)]
    assert chatty_lines == [f"c{k}" for k in range(5)]
    assert not live_logs_redis().exists(cut.stream.key)
    assert not quiet._pending and not chatty._pending
