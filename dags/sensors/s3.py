"""`s3`: until an object exists (`key`), or a prefix holds at least `min_objects` objects,
in an S3-compatible store (AWS, MinIO, Ceph, moto...).

One HEAD (a key) or one ListObjectsV2 of at most `min_objects` keys (a prefix) per poke,
with the poke's timeout on connect and read and no retry of botocore's own (the sensor's
backoff is the retry). Path-style addressing, which every S3-compatible store answers.

Credentials are the tenant's secrets (filled in by the caller); without them the request is
unsigned. Never the platform's own: botocore would otherwise read the worker's or the
beat's environment and instance profile, and a tenant could probe buckets with them.

The SSRF guard resolves the endpoint's host and refuses a private one before botocore
connects (`dags.sensors.base.addresses_checked`). Unlike the http handler, the connection is
not pinned to the checked address (botocore owns it), so a DNS answer that changes within
the instant between the check and the connect is the residual risk; the endpoints that
matter (literal private IPs, localhost names) are refused when the DAG is saved, too.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any
from urllib.parse import urlsplit

from dags.sensors.base import Poke, TargetRefused, addresses_checked


def s3_poke(
    config: Mapping[str, Any], *, allowed_hosts: Collection[str], timeout_seconds: float
) -> Poke:
    # boto3 is heavy to import; only a process that pokes an s3 sensor pays for it.
    import boto3  # noqa: PLC0415
    from botocore import UNSIGNED  # noqa: PLC0415
    from botocore.config import Config  # noqa: PLC0415
    from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415

    region = config.get("region") or "us-east-1"
    endpoint = config.get("endpoint_url") or f"https://s3.{region}.amazonaws.com"
    parts = urlsplit(endpoint)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        addresses_checked(parts.hostname or "", port, allowed_hosts=allowed_hosts)
    except TargetRefused as refused:
        return Poke(done=False, error=str(refused), refused=True)
    except (OSError, UnicodeError, ValueError) as error:
        return Poke(done=False, error=f"could not resolve {parts.hostname!r}: {error}")
    signed = bool(config.get("access_key_id"))
    client = boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint,
        region_name=region,
        aws_access_key_id=config.get("access_key_id") if signed else None,
        aws_secret_access_key=config.get("secret_access_key") if signed else None,
        aws_session_token=None,
        config=Config(
            connect_timeout=timeout_seconds,
            read_timeout=timeout_seconds,
            retries={"max_attempts": 1, "mode": "standard"},
            s3={"addressing_style": "path"},
            proxies={},
            **({} if signed else {"signature_version": UNSIGNED}),
        ),
    )
    bucket = config["bucket"]
    try:
        if "key" in config:
            head = client.head_object(Bucket=bucket, Key=config["key"])
            return Poke(
                done=True,
                result={
                    "bucket": bucket,
                    "key": config["key"],
                    "size": head.get("ContentLength"),
                    "etag": head.get("ETag"),
                },
            )
        wanted = int(config.get("min_objects", 1))
        listing = client.list_objects_v2(Bucket=bucket, Prefix=config["prefix"], MaxKeys=wanted)
        keys = [item["Key"] for item in listing.get("Contents", [])]
        if len(keys) >= wanted:
            return Poke(
                done=True, result={"bucket": bucket, "prefix": config["prefix"], "keys": keys}
            )
        return Poke(
            done=False, error=f"{len(keys)} of {wanted} objects under {config['prefix']!r} so far"
        )
    except ClientError as error:
        code = str(error.response.get("Error", {}).get("Code", ""))
        if code in ("404", "NoSuchKey", "NotFound"):
            return Poke(done=False, error=f"no object {config.get('key')!r} yet")
        return Poke(done=False, error=f"s3 {code or 'error'}: {error}")
    except BotoCoreError as error:
        return Poke(done=False, error=f"s3 endpoint {endpoint} unreachable: {error}")
    finally:
        client.close()
