"""Executions archives as Parquet: one file per archived partition (or batch of rows).

The schema follows the executions table column for column, derived from the model (so a
column added later is archived too):

    uuid columns (id, tenant_id, task_id, root_execution_id, retry_of_id, claim_token)
                                         -> string (the canonical 8-4-4-4-12 text)
    date-times (scheduled_at, queued_at, started_at, completed_at, lease_expires_at,
    dead_lettered_at, created_at, updated_at)
                                         -> timestamp[us, tz=UTC]
    JSON columns (parameters, result, progress)
                                         -> string holding the JSON text (field metadata
                                            {"json": "true"}); Parquet has no JSON type
    integers (priority, attempt, max_attempts, exit_code)
                                         -> int64
    dead_lettered                        -> bool
    text (status, trigger, queue, worker_id, error_message, error_class)
                                         -> string

Every column is nullable. Files are zstd-compressed, written in row groups of ROW_GROUP rows;
the row count read back from the file's footer must equal the rows exported, as for the JSON
Lines archives, before anything is dropped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.json as pj
import pyarrow.parquet as pq
from django.db import models

ROW_GROUP = 50_000
JSON_META = {b"json": b"true"}


def _arrow_type(field: models.Field) -> pa.DataType:
    if isinstance(field, models.DateTimeField):
        return pa.timestamp("us", tz="UTC")
    if isinstance(field, models.BooleanField):
        return pa.bool_()
    if isinstance(field, models.IntegerField | models.AutoField):
        return pa.int64()
    if isinstance(field, models.FloatField):
        return pa.float64()
    return pa.string()


def schema_for(model: type[models.Model]) -> pa.Schema:
    """The Parquet schema of `model`'s table, in its column order."""
    fields = []
    for field in model._meta.concrete_fields:
        metadata = JSON_META if isinstance(field, models.JSONField) else None
        fields.append(pa.field(field.column, _arrow_type(field), nullable=True, metadata=metadata))
    return pa.schema(fields)


def _to_arrow(value: Any, field: pa.Field) -> Any:
    if value is None:
        return None
    if field.metadata == JSON_META:
        return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    if pa.types.is_timestamp(field.type):
        moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    if pa.types.is_string(field.type):
        return str(value)
    return value


def write_parquet(path: Path, *, rows: Iterable[dict[str, Any]], schema: pa.Schema) -> int:
    """Write `rows` (dicts keyed by column; JSON columns decoded or as text, date-times as
    datetimes or ISO text) to `path`; returns how many were written."""
    written = 0
    with pq.ParquetWriter(path, schema, compression="zstd") as writer:
        batch: dict[str, list[Any]] = {name: [] for name in schema.names}
        size = 0
        for row in rows:
            for field in schema:
                batch[field.name].append(_to_arrow(row.get(field.name), field))
            size += 1
            if size >= ROW_GROUP:
                writer.write_table(pa.Table.from_pydict(batch, schema=schema))
                written += size
                batch, size = {name: [] for name in schema.names}, 0
        if size or not written:
            writer.write_table(pa.Table.from_pydict(batch, schema=schema))
            written += size
    return written


def select_list(model: type[models.Model]) -> str:
    """The columns of `model`'s table for an export whose JSON columns come out as their JSON
    text (what the Parquet schema holds), so PostgreSQL's JSON lines need no reshaping."""
    return ", ".join(
        f"{field.column}::text AS {field.column}"
        if isinstance(field, models.JSONField)
        else field.column
        for field in model._meta.concrete_fields
    )


def write_parquet_from_json_lines(path: Path, *, chunks: Iterable[bytes], schema: pa.Schema) -> int:
    """Write JSON lines (PostgreSQL's `row_to_json` of `select_list`) to `path`, parsed by
    Arrow's own JSON reader: no Python per row, so a partition of millions of rows converts at
    about the speed PostgreSQL streams it. The lines are spooled next to `path` first."""
    spool = path.with_suffix(".jsonl")
    with spool.open("wb") as handle:
        for chunk in chunks:
            handle.write(chunk)
    written = 0
    # Arrow's reader refuses an empty stream: an empty partition is an empty file.
    reader = (
        pj.open_json(
            spool,
            read_options=pj.ReadOptions(block_size=16 << 20),
            parse_options=pj.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="error"
            ),
        )
        if spool.stat().st_size
        else ()
    )
    with pq.ParquetWriter(path, schema, compression="zstd") as writer:
        for batch in reader:
            table = pa.Table.from_batches([batch]).select(schema.names).cast(schema)
            writer.write_table(table, row_group_size=ROW_GROUP)
            written += table.num_rows
        if not written:
            writer.write_table(schema.empty_table())
    spool.unlink()
    return written


def parquet_row_count(path: Path) -> int:
    return pq.ParquetFile(path).metadata.num_rows


def read_parquet_rows(path: Path) -> Iterator[dict[str, Any]]:
    """Rows as the JSON Lines archives give them: JSON columns decoded, date-times as ISO
    text (so a restored row is JSON, whichever format it came from)."""
    parquet = pq.ParquetFile(path)
    json_columns = {f.name for f in parquet.schema_arrow if f.metadata == JSON_META}
    for batch in parquet.iter_batches(batch_size=10_000):
        for row in batch.to_pylist():
            for name, value in row.items():
                if value is None:
                    continue
                if name in json_columns:
                    row[name] = json.loads(value)
                elif isinstance(value, datetime):
                    row[name] = value.isoformat()
            yield row
