"""A log's words are stored beside its text (`ExecutionLog.words`), derived by PostgreSQL on
every write whoever writes, filled in batches for logs stored before the column, never
archived; the search reads them instead of parsing each candidate's text again."""

from __future__ import annotations

import gzip
import importlib
import json
import uuid
from datetime import UTC, datetime

import pytest
from django.db import connection
from django.utils import timezone

from data_lifecycle.services.archive_store import ArchiveStore
from data_lifecycle.services.retention import logs_archive
from handler_contract.base import HandlerOutcome
from runs.finish import run_finish
from scheduler_app.models import ExecutionLog, TaskExecution
from scheduler_app.selectors import log_search
from tests.factories import make_task

pytestmark = pytest.mark.django_db

MIGRATION = importlib.import_module("scheduler_app.migrations.0020_log_words_column")


def _words(execution_id) -> str | None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT words::text FROM scheduler_app_executionlog WHERE execution_id = %s",
            [execution_id],
        )
        return cursor.fetchone()[0]


def _derived(text: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT to_tsvector('simple', left(%s, %s))::text", [text, log_search.SEARCHABLE_CHARS]
        )
        return cursor.fetchone()[0]


def _running(task) -> TaskExecution:
    return TaskExecution.objects.create(
        id=uuid.uuid4(),
        tenant_id=task.tenant_id,
        task=task,
        status="running",
        trigger="manual",
        queue="normal",
        scheduled_at=timezone.now(),
        attempt=1,
        max_attempts=1,
        worker_id="w1",
        claim_token=uuid.uuid4(),
    )


def test_a_finish_stores_its_logs_words(tenant):
    run = _running(make_task(tenant, name="fetcher", schedule={"type": "manual"}))
    run_finish(
        execution_id=run.id,
        claim_token=run.claim_token,
        outcome=HandlerOutcome("success"),
        log_text="upstream ECONNREFUSED at host-7",
    )
    assert _words(run.id) == _derived("upstream ECONNREFUSED at host-7")
    assert "'econnrefused'" in _words(run.id)


def test_the_words_follow_the_text_and_cannot_be_set_apart_from_it(tenant):
    log = ExecutionLog.objects.create(execution_id=uuid.uuid4(), tenant=tenant, text="first try")
    assert _words(log.execution_id) == _derived("first try")
    ExecutionLog.platform.filter(execution_id=log.execution_id).update(text="second attempt")
    assert _words(log.execution_id) == _derived("second attempt")
    # A writer naming words of its own gets the text's words.
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE scheduler_app_executionlog SET words = to_tsvector('simple', 'forged') "
            "WHERE execution_id = %s",
            [log.execution_id],
        )
    assert _words(log.execution_id) == _derived("second attempt")
    # What a search covers: the first SEARCHABLE_CHARS characters.
    long_text = "a " * log_search.SEARCHABLE_CHARS + "beyond"
    ExecutionLog.platform.filter(execution_id=log.execution_id).update(text=long_text)
    assert "beyond" not in _words(log.execution_id)


def test_loaded_logs_leave_their_words_in_the_database(tenant):
    ExecutionLog.objects.create(execution_id=uuid.uuid4(), tenant=tenant, text="some output")
    log = ExecutionLog.platform.get(tenant=tenant)
    assert log.get_deferred_fields() == {"words"}
    log.truncated = True
    log.save()  # a deferred field is not written back
    assert _words(log.execution_id) == _derived("some output")


def test_the_backfill_fills_the_logs_stored_before_the_trigger_in_batches(tenant):
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE scheduler_app_executionlog DISABLE TRIGGER execution_log_words")
        cursor.execute(
            "INSERT INTO scheduler_app_executionlog (execution_id, tenant_id, text, size_bytes,"
            " truncated, created_at) SELECT gen_random_uuid(), %s, 'fetched ' || g || ' rows',"
            " 0, false, now() FROM generate_series(1, 1203) g",
            [tenant.id],
        )
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # no deferred checks pending
        cursor.execute("ALTER TABLE scheduler_app_executionlog ENABLE TRIGGER execution_log_words")
        cursor.execute("SELECT count(*) FROM scheduler_app_executionlog WHERE words IS NULL")
        assert cursor.fetchone()[0] == 1203

        assert MIGRATION.log_words_backfill(cursor, batch_rows=100) == 1203

        cursor.execute(
            "SELECT count(*) FROM scheduler_app_executionlog "
            "WHERE words IS DISTINCT FROM to_tsvector('simple', left(text, %s))",
            [log_search.SEARCHABLE_CHARS],
        )
        assert cursor.fetchone()[0] == 0
        assert MIGRATION.log_words_backfill(cursor, batch_rows=100) == 0  # nothing left


def test_the_search_reads_the_stored_words_never_the_text():
    for words in ("ECONNREFUSED", "host-7 eu-3", '"connection refused"', "-ok", "a or b"):
        query = log_search.logs_with_words(words).values("execution_id")
        with connection.cursor() as cursor:
            sql, params = query.query.sql_with_params()
            cursor.execute(f"EXPLAIN (VERBOSE) {sql}", params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
        assert "to_tsvector" not in plan and "words" in plan, plan


def test_archived_logs_carry_their_text_not_their_words(tenant, tmp_path):
    log = ExecutionLog.objects.create(execution_id=uuid.uuid4(), tenant=tenant, text="old output")
    ExecutionLog.platform.filter(execution_id=log.execution_id).update(
        created_at=datetime(2020, 1, 1, tzinfo=UTC)
    )
    store = ArchiveStore(str(tmp_path))
    report = logs_archive(before=datetime(2021, 1, 1, tzinfo=UTC), store=store)
    assert report.rows == 1
    (archived,) = tmp_path.rglob("*.jsonl.gz")
    with gzip.open(archived) as lines:
        (row,) = [json.loads(line) for line in lines]
    assert row["text"] == "old output" and "words" not in row


@pytest.mark.django_db(transaction=True)
def test_the_migration_fills_the_column_of_logs_stored_before_it_and_swaps_the_index(tenant):
    from django.db.migrations.executor import MigrationExecutor

    before = [("scheduler_app", "0019_invitation_tokens")]
    after = [("scheduler_app", "0020_log_words_column")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO scheduler_app_executionlog (execution_id, tenant_id, text, "
                "size_bytes, truncated, created_at) SELECT gen_random_uuid(), %s, "
                "'fetched ' || g || ' rows', 0, false, now() FROM generate_series(1, 700) g",
                [tenant.id],
            )
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(after)
        filled_at_0019 = _filled_and_indexed()
        # Back to every app's latest state, as the tests after this one expect.
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    assert filled_at_0019 == ((700, 700), [("idx_log_search_words", True)])
    found = log_search.logs_with_words("fetched 7 rows").filter(tenant=tenant)
    assert found.count() == 1


def _filled_and_indexed():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), count(*) FILTER (WHERE words = to_tsvector('simple', text)) "
            "FROM scheduler_app_executionlog"
        )
        counts = cursor.fetchone()
        cursor.execute(
            "SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c "
            "ON c.oid = i.indexrelid WHERE c.relname IN ('idx_log_search_words', 'idx_log_words')"
        )
        return counts, cursor.fetchall()
