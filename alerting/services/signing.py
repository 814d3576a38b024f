"""Webhook signatures that carry their time (Stripe's scheme), and the receiver's check.

    X-Scheduler-Signature: t=1767225600,v1=<hex HMAC-SHA256(secret, "1767225600." + body)>

The timestamp is inside what is signed, so a receiver that refuses signatures older than a few
minutes also refuses a captured delivery replayed later; without it a signature was valid
forever. `signature_verify` is the receiver's side, plain Python (no Django), meant to be
copied: the README shows it.
"""

from __future__ import annotations

import hashlib
import hmac
import time

SCHEME = "v1"
DEFAULT_TOLERANCE_SECONDS = 300


def signature_header(secret: str, body: bytes, *, timestamp: int | None = None) -> str:
    signed_at = int(time.time()) if timestamp is None else int(timestamp)
    digest = hmac.new(secret.encode(), f"{signed_at}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={signed_at},{SCHEME}={digest}"


def signature_verify(
    secret: str,
    body: bytes,
    header: str,
    *,
    tolerance_seconds: int = DEFAULT_TOLERANCE_SECONDS,
    now: float | None = None,
) -> bool:
    """True when `header` signs exactly `body` with `secret`, at most `tolerance_seconds` ago
    (or ahead: clocks differ). Any `v1=` entry may match (a sender rotating its secret may
    send two)."""
    parts = [item.split("=", 1) for item in header.split(",") if "=" in item]
    timestamps = [value for key, value in parts if key.strip() == "t"]
    candidates = [value.strip() for key, value in parts if key.strip() == SCHEME]
    stamp = timestamps[0].strip() if len(timestamps) == 1 else ""
    # ASCII digits only: "²".isdigit() is true too, and int() refuses it.
    if not (stamp.isascii() and stamp.isdigit()) or not candidates:
        return False
    signed_at = int(stamp)
    current = time.time() if now is None else now
    if abs(current - signed_at) > tolerance_seconds:
        return False
    expected = hmac.new(
        secret.encode(), f"{signed_at}.".encode() + body, hashlib.sha256
    ).hexdigest()
    return any(hmac.compare_digest(expected, candidate) for candidate in candidates)
