"""The history the log_search bench searches, bulk-loaded (see that scenario's docstring):
executions and logs COPYed in, their secondary indexes built after the load."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from bench.report import Result

BIG_LOGS = 800
BIG_LOG_BYTES = 256 * 1024
DEMO_ROWS = 10_000
TASKS = 1000
SPAN_DAYS = 110
COPY_CHUNK = 20_000
# A bijection on 128-bit integers (odd multiplier): unique, scattered execution ids.
_SCRAMBLE = 0x9E3779B97F4A7C15F39CC0605CEDC835


def _uuid(index: int, kind: int) -> str:
    value = ((index << 8 | kind) * _SCRAMBLE) % (1 << 128)
    text = f"{value:032x}"
    return f"{text[:8]}-{text[8:12]}-4{text[13:16]}-8{text[17:20]}-{text[20:]}"


def _copy(sql: str, lines) -> None:
    """COPY text-format lines in, a chunk per write."""
    from django.db import connection, transaction

    connection.ensure_connection()
    with transaction.atomic(), connection.connection.cursor() as cursor, cursor.copy(sql) as copy:
        chunk: list[str] = []
        for line in lines:
            chunk.append(line)
            if len(chunk) >= COPY_CHUNK:
                copy.write("".join(chunk))
                chunk.clear()
        if chunk:
            copy.write("".join(chunk))


def _secondary_indexes(cursor, table: str) -> list[tuple[str, str, str | None]]:
    """(name, definition, constraint) of `table`'s indexes but its primary key."""
    cursor.execute(
        "SELECT c.relname, pg_get_indexdef(i.indexrelid), con.conname "
        "FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "LEFT JOIN pg_constraint con ON con.conindid = i.indexrelid "
        "WHERE i.indrelid = %s::regclass AND NOT i.indisprimary",
        [table],
    )
    return cursor.fetchall()


def _indexes_drop(cursor, table: str) -> list[tuple[str, str, str | None]]:
    indexes = _secondary_indexes(cursor, table)
    for name, _, constraint in indexes:
        if constraint:
            cursor.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{constraint}"')
        else:
            cursor.execute(f'DROP INDEX "{name}"')
    return indexes


def _indexes_create(cursor, table: str, indexes) -> None:
    cursor.execute("SET maintenance_work_mem = '512MB'")
    for _name, definition, constraint in indexes:
        if constraint:
            columns = definition.split(" USING btree ", 1)[1]
            cursor.execute(f'ALTER TABLE {table} ADD CONSTRAINT "{constraint}" UNIQUE {columns}')
        else:
            # A partitioned table's index is defined `ON ONLY` the parent: built so, it would
            # stay invalid, with no index on any partition.
            cursor.execute(definition.replace(" ON ONLY ", " ON "))
    cursor.execute("RESET maintenance_work_mem")


def _big_log(index: int) -> str:
    lines, size, n = [], 0, 0
    while size < BIG_LOG_BYTES:
        line = (
            f"{index}.{n} GET /api/items/{n % 5000} answered 200 in {n % 300} ms "
            f"from host-{n % 97} region eu-{n % 5} ok"
        )
        lines.append(line)
        size += len(line) + 1
        n += 1
    return "\\n".join(lines)


def history_load(rows: int, result: Result) -> None:
    from django.db import connection

    from scheduler_app import partitions
    from scheduler_app.models import ExecutionLog, TaskExecution
    from scheduler_app.services.tenants import tenant_create_with_admin

    now = datetime.now(UTC).replace(microsecond=0)
    this_month = partitions.month_start(now)
    for offset in range(4, -1, -1):
        partitions.partition_create(month=partitions.add_months(this_month, -offset))
    acme, _ = tenant_create_with_admin(slug="acme", username="acme", password="bench-pass-1")
    demo, _ = tenant_create_with_admin(slug="demo", username="demo", password="bench-pass-1")
    task_ids: dict[str, list[str]] = {}
    with connection.cursor() as cursor:
        for tenant, count in ((acme, TASKS), (demo, 10)):
            cursor.execute(
                """
                INSERT INTO scheduler_app_taskdefinition
                  (id, tenant_id, name, description, schedule_type, schedule_expression,
                   timezone, handler_type, handler_config, parameters, timeout_seconds,
                   max_attempts, backoff, base_delay_seconds, max_delay_seconds, priority,
                   enabled, paused, tags, notifications, catchup, overlap, jitter_seconds,
                   created_at, updated_at, changed_at)
                SELECT gen_random_uuid(), %s, 'bench-' || g, '', 'manual', '', 'UTC', 'python',
                       '{"type": "python", "callable": "noop"}', '{}', 300, 3, 'exponential',
                       10, 3600, 5, true, false, '[]', '{}', 'latest', 'allow', 0, now(),
                       now(), now()
                FROM generate_series(1, %s) g RETURNING id
                """,
                [tenant.id, count],
            )
            task_ids[tenant.slug] = [str(row[0]) for row in cursor.fetchall()]
    span = timedelta(days=SPAN_DAYS).total_seconds()
    plan = [("acme", acme, rows, 1), ("demo", demo, DEMO_ROWS, 2)]
    executions, logs = TaskExecution._meta.db_table, ExecutionLog._meta.db_table

    def execution_lines():
        for slug, tenant, count, kind in plan:
            tasks = task_ids[slug]
            for i in range(count):
                at = now - timedelta(seconds=span * (count - i) / count)
                done = at + timedelta(milliseconds=1 + i % 3000)
                status = "failed" if i % 50 == 0 else "success"
                yield (
                    f"{_uuid(i, kind)}\t{tenant.id}\t{tasks[i % len(tasks)]}\t{status}\t"
                    f"schedule\t5\tnormal\t{at.isoformat()}\t{at.isoformat()}\t{at.isoformat()}\t"
                    f"{done.isoformat()}\t1\t3\tbench@host\t\\N\t0\t\t\tf\t"
                    f"{at.isoformat()}\t{done.isoformat()}\t\n"
                )

    def log_lines():
        for _slug, tenant, count, kind in plan:
            for i in range(count):
                at = now - timedelta(seconds=span * (count - i) / count)
                done = at + timedelta(milliseconds=1 + i % 3000)
                h = (i * 2654435761) % 4294967296
                if kind == 1 and i >= count - BIG_LOGS:
                    text = _big_log(i)
                else:
                    tail = " ECONNREFUSED upstream-gateway" if h % 100_000 == 0 else " ok"
                    text = (
                        f"{at.isoformat()} [stdout] fetched {h % 1000} rows from host-{h % 97}"
                        f" in region eu-{h % 5}{tail}\\n"
                    )
                yield (
                    f"{_uuid(i, kind)}\t{tenant.id}\t{text}\t{len(text)}\tf\t{done.isoformat()}\n"
                )

    with connection.cursor() as cursor:
        execution_indexes = _indexes_drop(cursor, executions)
        log_indexes = _indexes_drop(cursor, logs)
    started = time.monotonic()
    _copy(
        f"COPY {executions} (id, tenant_id, task_id, status, trigger, priority, queue, "
        "scheduled_at, queued_at, started_at, completed_at, attempt, max_attempts, worker_id, "
        "result, exit_code, error_message, error_class, dead_lettered, created_at, updated_at, "
        "idempotency_key) FROM STDIN",
        execution_lines(),
    )
    copied = time.monotonic() - started
    print(f"  executions copied in {copied:.0f}s", flush=True)
    with connection.cursor() as cursor:
        _indexes_create(cursor, executions, execution_indexes)
    execution_seconds = time.monotonic() - started
    print(f"  executions indexed ({execution_seconds:.0f}s)", flush=True)
    started = time.monotonic()
    # The words are derived by the trigger as the rows come in (what a finish costs).
    _copy(
        f"COPY {logs} (execution_id, tenant_id, text, size_bytes, truncated, created_at) "
        "FROM STDIN",
        log_lines(),
    )
    log_copied = time.monotonic() - started
    print(f"  logs copied with their words in {log_copied:.0f}s", flush=True)
    with connection.cursor() as cursor:
        _indexes_create(cursor, logs, log_indexes)
        cursor.execute(f"VACUUM ANALYZE {executions}")
        cursor.execute(f"VACUUM ANALYZE {logs}")
        cursor.execute("ANALYZE")  # the task definitions and tenants too, as autovacuum would
    log_seconds = time.monotonic() - started
    total = rows + DEMO_ROWS
    result.add(
        measure="load executions (COPY, then indexes)",
        value=total / execution_seconds,
        unit="rows/s",
        detail=f"{total:,} rows in {execution_seconds:.0f}s ({copied:.0f}s COPY)",
    )
    result.add(
        measure="load logs (COPY, words by trigger, then indexes)",
        value=total / log_seconds,
        unit="rows/s",
        detail=f"{total:,} logs ({BIG_LOGS} of 256 KB) in {log_seconds:.0f}s "
        f"({log_copied:.0f}s COPY with words)",
    )
