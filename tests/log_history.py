"""A large log history in one statement: finished runs of a task, each with a stored log."""

from __future__ import annotations

from django.db import connection

# Words in every log, in an order no log has ("ok fetched"): a phrase of them matches no
# log, so a page of it is never filled and a search walks every log of the history.
# (SQL over the row number g, `%%` for the driver's `%`.)
LOG_LINE = "'fetched ' || (g %% 1000) || ' rows from host-' || (g %% 97) || ' ok'"
UNFILLABLE_PHRASE = '"ok fetched"'


def logged_runs_create(task, count: int) -> None:
    """`count` finished runs of `task`, a second apart back from now, each with a short log
    (LOG_LINE); the statistics refreshed, as autovacuum would."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH runs AS (
              INSERT INTO scheduler_app_taskexecution
                (id, tenant_id, task_id, status, trigger, priority, queue, scheduled_at,
                 attempt, max_attempts, worker_id, error_message, error_class, dead_lettered,
                 created_at, updated_at, idempotency_key)
              SELECT gen_random_uuid(), %s, %s, 'success', 'manual', 5, 'normal',
                     now() - g * interval '1 second', 1, 1, '', '', '', false, now(), now(), ''
              FROM generate_series(1, %s) g
              RETURNING id, tenant_id, scheduled_at)
            INSERT INTO scheduler_app_executionlog
              (execution_id, tenant_id, text, size_bytes, truncated, created_at)
            SELECT runs.id, runs.tenant_id, l.text, octet_length(l.text), false, runs.scheduled_at
            FROM (SELECT *, row_number() OVER () AS g FROM runs) runs,
                 LATERAL (SELECT {LOG_LINE} AS text) l
            """,
            [task.tenant_id, task.id, count],
        )
        cursor.execute("ANALYZE scheduler_app_executionlog")
        cursor.execute("ANALYZE scheduler_app_taskexecution")
