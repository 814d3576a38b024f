"""`sql`: until a query on a tenant-configured PostgreSQL database returns a row (the
"migration completed" case: `SELECT 1 FROM schema_migrations WHERE version = '42'`).

The DSN is a tenant secret (filled in by the caller). Each poke connects with a connect
timeout, to the address the SSRF guard checked (`hostaddr`: a name cannot resolve elsewhere
between the check and the connect), in a read-only session (`default_transaction_read_only`)
and a read-only transaction (`SET TRANSACTION READ ONLY`), under a statement timeout, fetches
one row and closes. The platform's own databases (same host and database name as
settings.DATABASES, passed in) are refused whatever the allow list says: a tenant must not
read the platform's tables through a sensor. A socket path host is refused too, and so are
DSN keys that name the beat's files or set session options (`DSN_KEYS` lists what is allowed).
The query is prepared, so it is one statement: it cannot commit its way out of the read-only
transaction.
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from dags.sensors.base import Poke, TargetRefused, addresses_checked
from handler_contract.ssrf import resolve_addresses

PlatformDatabase = tuple[str, int, str]  # (host, port, database name)
# What a tenant's DSN may say: no file of the beat's (passfile, service files, client keys),
# no options (the session's read-only mode and statement timeout are the platform's).
DSN_KEYS = {"host", "port", "dbname", "user", "password", "sslmode", "application_name"}
_LOOPBACK = "loopback"


def sql_poke(
    config: Mapping[str, Any],
    *,
    allowed_hosts: Collection[str],
    timeout_seconds: float,
    platform_databases: Iterable[PlatformDatabase],
) -> Poke:
    import psycopg  # noqa: PLC0415  (only a sensor process needs a second connection)
    from psycopg.conninfo import conninfo_to_dict  # noqa: PLC0415

    try:
        params = conninfo_to_dict(config["dsn"])
    except psycopg.ProgrammingError:
        return Poke(done=False, error="dsn: not a PostgreSQL connection string", refused=True)
    unknown = sorted(set(params) - DSN_KEYS)
    if unknown:
        return Poke(done=False, error=f"dsn: {', '.join(unknown)} not allowed", refused=True)
    host = str(params.get("host") or "")
    port = int(params.get("port") or 5432)
    dbname = str(params.get("dbname") or params.get("user") or "")
    if not host or host.startswith("/") or "," in host:
        return Poke(done=False, error="dsn: needs one network host (no socket path)", refused=True)
    try:
        addresses = addresses_checked(host, port, allowed_hosts=allowed_hosts)
        _platform_refuse(host, port, dbname, addresses, platform_databases)
    except TargetRefused as refused:
        return Poke(done=False, error=str(refused), refused=True)
    except (OSError, UnicodeError, ValueError) as error:
        return Poke(done=False, error=f"could not resolve {host!r}: {error}")
    milliseconds = int(float(config["statement_timeout"]) * 1000)
    params.update(
        hostaddr=str(addresses[0]),
        connect_timeout=max(1, int(timeout_seconds)),
        options=f"-c default_transaction_read_only=on -c statement_timeout={milliseconds}",
        application_name="scheduler-sensor",
        passfile=os.devnull,  # never the beat's own ~/.pgpass
    )
    try:
        with psycopg.connect(**params, autocommit=False) as connection:
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION READ ONLY")
                # Prepared: one statement only, so no "COMMIT; ..." steps out of the
                # read-only transaction.
                cursor.execute(config["query"], prepare=True)
                row = cursor.fetchone() if cursor.description else None
            connection.rollback()
    except psycopg.errors.QueryCanceled:
        return Poke(
            done=False, error=f"query cancelled after {milliseconds} ms (statement timeout)"
        )
    except psycopg.OperationalError as error:
        return Poke(done=False, error=f"could not connect to {host}:{port}: {_first_line(error)}")
    except psycopg.Error as error:
        return Poke(done=False, error=f"query failed: {_first_line(error)}")
    if row is None:
        return Poke(done=False, error="the query returned no row yet")
    return Poke(done=True, result={"row": json.loads(json.dumps(list(row), default=str))})


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:500]


def _platform_refuse(
    host: str,
    port: int,
    dbname: str,
    addresses: list,
    platform_databases: Iterable[PlatformDatabase],
) -> None:
    """Same database name on the same server (by name or by address) as one of the
    platform's: refused."""
    mine = {str(ip) for ip in addresses} | {host.lower()}
    if any(ip.is_loopback for ip in addresses):
        mine.add(_LOOPBACK)  # 127.0.0.1, 127.0.0.2 and ::1 reach the same server
    for platform_host, platform_port, platform_name in platform_databases:
        if platform_name != dbname or int(platform_port or 5432) != port:
            continue
        theirs = {platform_host.lower()}
        try:
            resolved = resolve_addresses(platform_host, port)
            theirs |= {str(ip) for ip in resolved}
            theirs |= {_LOOPBACK for ip in resolved if ip.is_loopback}
        except OSError:
            pass
        if mine & theirs:
            raise TargetRefused(
                f"refusing to query {host}:{port}/{dbname}: it is the platform's own database"
            )
