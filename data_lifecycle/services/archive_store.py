"""Where archived history goes: Parquet files (executions, `parquet_archive`) or gzip-compressed
JSON Lines files (logs, and executions archived before Parquet) plus a small manifest each,
in a directory or an S3-compatible bucket (`ARCHIVE_URL=s3://bucket/prefix`, boto3 needed,
`ARCHIVE_S3_ENDPOINT_URL` for MinIO and friends).

Every file is written locally first and read back: the number of rows in the file must equal
the number of rows the caller exported before anything is deleted from the database.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from django.conf import settings

from data_lifecycle.services.parquet_archive import (
    parquet_row_count,
    read_parquet_rows,
    write_parquet,
    write_parquet_from_json_lines,
)

SUFFIX = ".jsonl.gz"
PARQUET_SUFFIX = ".parquet"


class ArchiveVerificationError(RuntimeError):
    """The archive file does not hold the rows it should: nothing was deleted."""


@dataclass(frozen=True)
class ArchiveFile:
    name: str
    location: str  # a path or s3:// URL: what restore_executions takes
    rows: int
    manifest: dict[str, Any]


def _default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, bytes | memoryview):
        return bytes(value).hex()
    raise TypeError(f"cannot archive a {type(value).__name__}")


def count_lines(path: Path) -> int:
    count = 0
    with gzip.open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            count += block.count(b"\n")
    return count


def read_rows(location: str) -> Iterator[dict[str, Any]]:
    """The rows of an archive file (Parquet or JSON Lines), from a path or an s3:// URL."""
    path = _fetch(location)
    if path.name.endswith(PARQUET_SUFFIX):
        yield from read_parquet_rows(path)
        return
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


class ArchiveStore:
    def __init__(self, url: str | None = None) -> None:
        self.url = url or settings.LIFECYCLE["ARCHIVE_URL"]
        parsed = urlparse(self.url)
        self.s3 = parsed.scheme == "s3"
        if self.s3:
            self.bucket, self.prefix = parsed.netloc, parsed.path.strip("/")
        else:
            self.root = Path(parsed.path if parsed.scheme == "file" else self.url)

    def write(
        self,
        *,
        name: str,
        rows: Iterable[dict[str, Any]],
        expected: int | None,
        meta: dict[str, Any],
    ) -> ArchiveFile:
        """Write `rows` as `name`.jsonl.gz (see `write_lines`)."""
        lines = (
            (json.dumps(row, default=_default, separators=(",", ":")) + "\n").encode()
            for row in rows
        )
        return self.write_lines(name=name, chunks=lines, expected=expected, meta=meta)

    def write_lines(
        self, *, name: str, chunks: Iterable[bytes], expected: int | None, meta: dict[str, Any]
    ) -> ArchiveFile:
        """Write newline-terminated JSON lines (in chunks of any size) as `name`.jsonl.gz.

        The file is read back and its row count must equal `expected` (when given) and the
        number of lines written, before the file is published; otherwise nothing is kept.
        """
        with tempfile.TemporaryDirectory() as scratch:
            local = Path(scratch) / f"{name}{SUFFIX}"
            written = 0
            # Level 1: archives are written once and rarely read; speed matters more
            # than the last 20% of size.
            with gzip.open(local, "wb", compresslevel=1) as handle:
                for chunk in chunks:
                    handle.write(chunk)
                    written += chunk.count(b"\n")
            return self._verify_and_publish(
                local,
                name=name,
                written=written,
                read_back=count_lines(local),
                expected=expected,
                meta=meta,
                described={"format": "jsonl.gz"},
            )

    def write_parquet(
        self,
        *,
        name: str,
        schema: Any,
        expected: int | None,
        meta: dict[str, Any],
        rows: Iterable[dict[str, Any]] | None = None,
        json_lines: Iterable[bytes] | None = None,
    ) -> ArchiveFile:
        """Write `rows` (dicts) or `json_lines` (PostgreSQL's JSON lines of the table) as
        `name`.parquet (`data_lifecycle.services.parquet_archive`): the row count in the
        file's footer must equal `expected` and the rows written before it is published."""
        with tempfile.TemporaryDirectory() as scratch:
            local = Path(scratch) / f"{name}{PARQUET_SUFFIX}"
            if json_lines is not None:
                written = write_parquet_from_json_lines(local, chunks=json_lines, schema=schema)
            else:
                written = write_parquet(local, rows=rows or (), schema=schema)
            return self._verify_and_publish(
                local,
                name=name,
                written=written,
                read_back=parquet_row_count(local),
                expected=expected,
                meta=meta,
                described={
                    "format": "parquet",
                    "schema": [f"{field.name}: {field.type}" for field in schema],
                },
                suffix=PARQUET_SUFFIX,
            )

    def _verify_and_publish(
        self,
        local: Path,
        *,
        name: str,
        written: int,
        read_back: int,
        expected: int | None,
        meta: dict[str, Any],
        described: dict[str, Any],
        suffix: str = SUFFIX,
    ) -> ArchiveFile:
        """Publish the archive file `local` once its rows written and read back are what was
        expected (`expected` None: what was written); else ArchiveVerificationError and
        nothing is kept. Its manifest is the caller's `meta`, the row count, the file's
        SHA-256 and size, and `described` (its format)."""
        wanted = written if expected is None else expected
        if read_back != wanted or written != wanted:
            raise ArchiveVerificationError(
                f"{name}: expected {wanted} rows, wrote {written}, read back {read_back}"
            )
        manifest = {
            **meta,
            "rows": read_back,
            "sha256": _sha256(local),
            "bytes": local.stat().st_size,
            **described,
        }
        location = self._publish(local, name, manifest, suffix=suffix)
        return ArchiveFile(name=name, location=location, rows=read_back, manifest=manifest)

    def _publish(
        self, local: Path, name: str, manifest: dict[str, Any], *, suffix: str = SUFFIX
    ) -> str:
        body = json.dumps(manifest, indent=2, default=_default)
        count = parquet_row_count if suffix == PARQUET_SUFFIX else count_lines
        if not self.s3:
            self.root.mkdir(parents=True, exist_ok=True)
            target = self.root / f"{name}{suffix}"
            partial = target.with_suffix(".part")
            shutil.copyfile(local, partial)
            if count(partial) != manifest["rows"]:
                partial.unlink()
                raise ArchiveVerificationError(f"{name}: copy into {self.root} lost rows")
            partial.replace(target)
            (self.root / f"{name}.manifest.json").write_text(body + "\n")
            return str(target)
        client = _s3_client()
        key = f"{self.prefix}/{name}{suffix}".lstrip("/")
        client.upload_file(str(local), self.bucket, key)
        size = client.head_object(Bucket=self.bucket, Key=key)["ContentLength"]
        if size != manifest["bytes"]:
            raise ArchiveVerificationError(f"{name}: uploaded {size} bytes of {manifest['bytes']}")
        client.put_object(
            Bucket=self.bucket, Key=f"{key[: -len(suffix)]}.manifest.json", Body=body.encode()
        )
        return f"s3://{self.bucket}/{key}"

    def manifests(self) -> list[dict[str, Any]]:
        """Every archive's manifest (with its `location`), oldest name first."""
        found = []
        if not self.s3:
            if not self.root.exists():
                return []
            for path in sorted(self.root.glob("*.manifest.json")):
                data = json.loads(path.read_text())
                name = path.name.removesuffix(".manifest.json")
                found.append({**data, "location": str(self.root / f"{name}{_suffix_of(data)}")})
            return found
        client = _s3_client()
        paginator = client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix):
            for item in page.get("Contents", []):
                key = item["Key"]
                if key.endswith(".manifest.json"):
                    data = json.loads(client.get_object(Bucket=self.bucket, Key=key)["Body"].read())
                    data_key = key.removesuffix(".manifest.json") + _suffix_of(data)
                    found.append({**data, "location": f"s3://{self.bucket}/{data_key}"})
        return sorted(found, key=lambda m: m["location"])


def _suffix_of(manifest: dict[str, Any]) -> str:
    return PARQUET_SUFFIX if manifest.get("format") == "parquet" else SUFFIX


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _s3_client():
    try:
        # Local: optional, only installations archiving to S3 need it.
        import boto3  # noqa: PLC0415
    except ImportError as error:
        raise RuntimeError("ARCHIVE_URL is s3://...: install boto3 (pip install boto3)") from error
    return boto3.client("s3", endpoint_url=settings.LIFECYCLE["ARCHIVE_S3_ENDPOINT_URL"])


def _fetch(location: str) -> Path:
    if not location.startswith("s3://"):
        return Path(location)
    parsed = urlparse(location)
    target = Path(tempfile.mkdtemp()) / Path(parsed.path).name
    _s3_client().download_file(parsed.netloc, parsed.path.lstrip("/"), str(target))
    return target
