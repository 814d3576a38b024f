"""Monthly range partitions of the executions table by `scheduled_at`.

The parent keeps the name Django knows (`scheduler_app_taskexecution`), so the ORM and every
later ordinary migration (AddField, AddIndex: ALTER TABLE / CREATE INDEX on the parent) work
unchanged. The SQL primary key is (id, scheduled_at); ids stay globally unique UUIDs so Django
still treats `id` as the key. A DEFAULT partition catches rows outside every monthly range
(a one-shot far in the future, history imported from long ago), so an insert never fails;
creating a month whose rows sit in the default moves them over in the same transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime

from django.db import connection as default_connection
from django.db import transaction

TABLE = "scheduler_app_taskexecution"
DEFAULT_PARTITION = f"{TABLE}_default"
PARTITION_PREFIX = f"{TABLE}_p"


@dataclass(frozen=True)
class Partition:
    name: str
    start: datetime | None  # None for the default partition
    end: datetime | None
    rows_estimate: int


def month_start(moment: datetime | date) -> date:
    return date(moment.year, moment.month, 1)


def add_months(month: date, count: int) -> date:
    index = month.year * 12 + (month.month - 1) + count
    return date(index // 12, index % 12 + 1, 1)


def partition_name(month: date) -> str:
    return f"{PARTITION_PREFIX}{month.year:04d}{month.month:02d}"


def _bound(month: date) -> str:
    return datetime(month.year, month.month, 1, tzinfo=UTC).isoformat()


def is_partitioned(connection=None) -> bool:
    connection = connection or default_connection
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relname = %s AND n.nspname = current_schema()",
            [TABLE],
        )
        row = cursor.fetchone()
    return bool(row) and row[0] == "p"


def partitions_list(connection=None) -> list[Partition]:
    """Every partition of the executions table, oldest first, the default one last."""
    connection = connection or default_connection
    if not is_partitioned(connection):
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid), c.reltuples::bigint "
            "FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "JOIN pg_class p ON p.oid = i.inhparent "
            "JOIN pg_namespace n ON n.oid = p.relnamespace "
            "WHERE p.relname = %s AND n.nspname = current_schema()",
            [TABLE],
        )
        rows = cursor.fetchall()
    found: list[Partition] = []
    for name, _bound_expr, estimate in rows:
        if name == DEFAULT_PARTITION:
            found.append(Partition(name, None, None, max(estimate, 0)))
            continue
        suffix = name.removeprefix(PARTITION_PREFIX)
        month = date(int(suffix[:4]), int(suffix[4:6]), 1)
        start = datetime(month.year, month.month, 1, tzinfo=UTC)
        nxt = add_months(month, 1)
        end = datetime(nxt.year, nxt.month, 1, tzinfo=UTC)
        found.append(Partition(name, start, end, max(estimate, 0)))
    return sorted(
        found, key=lambda p: (p.start is None, p.start or datetime.min.replace(tzinfo=UTC))
    )


def partition_create(*, month: date, connection=None, lock_timeout_ms: int = 5000) -> bool:
    """Create the partition for `month` if missing. Returns True when it was created.

    Rows of that month already sitting in the default partition are moved into it (detach
    the default, create, move, re-attach: one transaction). `lock_timeout` keeps a busy
    table from queueing every insert behind this DDL; the next housekeeping run retries.
    """
    connection = connection or default_connection
    name = partition_name(month)
    start, end = _bound(month), _bound(add_months(month, 1))
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL lock_timeout = {int(lock_timeout_ms)}")
        cursor.execute("SELECT to_regclass(%s)", [name])
        if cursor.fetchone()[0] is not None:
            return False
        cursor.execute(
            f"SELECT EXISTS (SELECT 1 FROM {DEFAULT_PARTITION} "
            "WHERE scheduled_at >= %s AND scheduled_at < %s)",
            [start, end],
        )
        stranded = cursor.fetchone()[0]
        if not stranded:
            cursor.execute(
                f"CREATE TABLE {name} PARTITION OF {TABLE} FOR VALUES FROM (%s) TO (%s)",
                [start, end],
            )
            return True
        cursor.execute(f"ALTER TABLE {TABLE} DETACH PARTITION {DEFAULT_PARTITION}")
        cursor.execute(
            f"CREATE TABLE {name} PARTITION OF {TABLE} FOR VALUES FROM (%s) TO (%s)", [start, end]
        )
        cursor.execute(
            f"INSERT INTO {TABLE} SELECT * FROM {DEFAULT_PARTITION} "
            "WHERE scheduled_at >= %s AND scheduled_at < %s",
            [start, end],
        )
        cursor.execute(
            f"DELETE FROM {DEFAULT_PARTITION} WHERE scheduled_at >= %s AND scheduled_at < %s",
            [start, end],
        )
        cursor.execute(f"ALTER TABLE {TABLE} ATTACH PARTITION {DEFAULT_PARTITION} DEFAULT")
    return True


def partitions_ensure(*, now: datetime, months_ahead: int = 2, connection=None) -> list[str]:
    """Make sure this month and the next `months_ahead` months have partitions."""
    connection = connection or default_connection
    if not is_partitioned(connection):
        return []
    created = []
    current = month_start(now)
    for offset in range(months_ahead + 1):
        month = add_months(current, offset)
        if partition_create(month=month, connection=connection):
            created.append(partition_name(month))
    return created


def partition_detach(*, name: str, connection=None, lock_timeout_ms: int = 5000) -> None:
    """Detach (ACCESS EXCLUSIVE on the parent, for an instant). CONCURRENTLY is not an option
    while a default partition exists; `lock_timeout` makes a busy table fail this fast
    instead of queueing every insert behind it (retention retries next run)."""
    connection = connection or default_connection
    with connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL lock_timeout = {int(lock_timeout_ms)}")
        cursor.execute(f"ALTER TABLE {TABLE} DETACH PARTITION {_checked(name)}")


def partitions_detached(connection=None) -> list[Partition]:
    """Monthly tables that are no longer attached: an archive run that stopped between detach
    and drop. Their rows are invisible to the application, so the next run finishes them."""
    connection = connection or default_connection
    if not is_partitioned(connection):
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind = 'r' AND c.relname LIKE %s "
            "AND NOT c.relispartition",
            [PARTITION_PREFIX.replace("_", r"\_") + "%"],
        )
        names = [row[0] for row in cursor.fetchall()]
    found = []
    for name in names:
        suffix = name.removeprefix(PARTITION_PREFIX)
        if len(suffix) != 6 or not (suffix.isascii() and suffix.isascii() and suffix.isdigit()):
            continue
        month = date(int(suffix[:4]), int(suffix[4:6]), 1)
        nxt = add_months(month, 1)
        found.append(
            Partition(
                name,
                datetime(month.year, month.month, 1, tzinfo=UTC),
                datetime(nxt.year, nxt.month, 1, tzinfo=UTC),
                0,
            )
        )
    return found


def partition_attach(*, partition: Partition, connection=None) -> None:
    connection = connection or default_connection
    with connection.cursor() as cursor:
        cursor.execute(
            f"ALTER TABLE {TABLE} ATTACH PARTITION {_checked(partition.name)} "
            "FOR VALUES FROM (%s) TO (%s)",
            [partition.start.isoformat(), partition.end.isoformat()],
        )


def partition_drop(*, name: str, connection=None) -> None:
    connection = connection or default_connection
    with connection.cursor() as cursor:
        # Deferred FK checks pending in this transaction would block the DROP.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute(f"DROP TABLE IF EXISTS {_checked(name)}")


def _checked(name: str) -> str:
    # Names come from pg_inherits, but they end up in DDL: accept only our own pattern.
    suffix = name.removeprefix(PARTITION_PREFIX)
    if not (
        name.startswith(PARTITION_PREFIX)
        and len(suffix) == 6
        and suffix.isascii()
        and suffix.isdigit()
    ):
        raise ValueError(f"{name!r} is not an executions partition")
    return name


def table_convert_to_partitioned(connection, *, now: datetime) -> None:
    """Turn the plain executions table into the partitioned one, keeping every row.

    Used by the migration. Index and constraint definitions are read from the catalog
    and replayed on the new parent under the same names, so Django's view of the table
    (and whatever earlier migrations added) is unchanged apart from the primary key.
    """
    if is_partitioned(connection):
        return
    old = f"{TABLE}_unpartitioned"
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT con.conname, con.contype, pg_get_constraintdef(con.oid), con.conindid "
            "FROM pg_constraint con JOIN pg_class c ON c.oid = con.conrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relname = %s AND n.nspname = current_schema() "
            "AND con.contype IN ('p', 'u', 'f')",
            [TABLE],
        )
        constraints = cursor.fetchall()
        pk_name = next(name for name, kind, _, _ in constraints if kind == "p")
        cursor.execute(
            "SELECT con.conname, con.conrelid::regclass::text FROM pg_constraint con "
            "WHERE con.contype = 'f' AND con.confrelid = to_regclass(%s)",
            [TABLE],
        )
        pointing = cursor.fetchall()
        if pointing:
            # A partitioned table's rows cannot be the target of a key on `id` alone.
            raise RuntimeError(
                "cannot partition executions: foreign keys point at it ("
                + ", ".join(f"{name} on {table}" for name, table in pointing)
                + "); declare those references with db_constraint=False"
            )
        for name, kind, definition, _ in constraints:
            if kind == "u" and "scheduled_at" not in definition:
                raise RuntimeError(
                    f"cannot partition executions: unique constraint {name} {definition} "
                    "must include scheduled_at"
                )
        constraint_index_oids = {oid for _, kind, _, oid in constraints if kind in ("p", "u")}
        cursor.execute(
            "SELECT i.relname, pg_get_indexdef(i.oid), i.oid FROM pg_index x "
            "JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid "
            "JOIN pg_namespace n ON n.oid = t.relnamespace "
            "WHERE t.relname = %s AND n.nspname = current_schema()",
            [TABLE],
        )
        indexes = [
            (name, sql) for name, sql, oid in cursor.fetchall() if oid not in constraint_index_oids
        ]
        cursor.execute(
            "SELECT DISTINCT date_trunc('month', scheduled_at AT TIME ZONE 'UTC')::date "
            f"FROM {TABLE}"
        )
        months = {row[0] for row in cursor.fetchall()}

        # Deferred FK checks still pending on the old table would block its DROP.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute(f"ALTER TABLE {TABLE} RENAME TO {old}")
        cursor.execute(
            f"CREATE TABLE {TABLE} (LIKE {old} INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
            "INCLUDING STORAGE INCLUDING COMMENTS) PARTITION BY RANGE (scheduled_at)"
        )
        cursor.execute(f"CREATE TABLE {DEFAULT_PARTITION} PARTITION OF {TABLE} DEFAULT")
        current = month_start(now)
        months |= {add_months(current, offset) for offset in range(3)}
        for month in sorted(months):
            cursor.execute(
                f"CREATE TABLE {partition_name(month)} PARTITION OF {TABLE} "
                "FOR VALUES FROM (%s) TO (%s)",
                [_bound(month), _bound(add_months(month, 1))],
            )
        cursor.execute(f"INSERT INTO {TABLE} SELECT * FROM {old}")
        cursor.execute(f"DROP TABLE {old}")
        cursor.execute(
            f"ALTER TABLE {TABLE} ADD CONSTRAINT {pk_name} PRIMARY KEY (id, scheduled_at)"
        )
        for name, kind, definition, _ in constraints:
            if kind == "u":
                cursor.execute(f"ALTER TABLE {TABLE} ADD CONSTRAINT {name} {definition}")
        for name, kind, definition, _ in constraints:
            if kind == "f":
                cursor.execute(f"ALTER TABLE {TABLE} ADD CONSTRAINT {name} {definition}")
        for _name, definition in indexes:
            cursor.execute(definition)
