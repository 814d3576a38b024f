"""What a poke answers, and the guard every poker calls before it connects."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from handler_contract.ssrf import IPAddress, blocked_reason, host_is_allowed, resolve_addresses


@dataclass(frozen=True)
class Poke:
    """`done`: the condition holds (the node succeeds with `result`). Otherwise `error` says
    why not yet (an unreachable host is "not yet": the sensor keeps polling until its
    timeout), and `refused` means never: the node fails with `error` at once."""

    done: bool
    result: Any = None
    error: str = ""
    refused: bool = False


class TargetRefused(Exception):
    """The target resolves to an address the tenant may not reach; nothing was sent."""


def addresses_checked(
    hostname: str, port: int, *, allowed_hosts: Collection[str]
) -> list[IPAddress]:
    """The addresses of `hostname`, every one of them allowed (TargetRefused otherwise).
    OSError when the name does not resolve (the caller's "not yet")."""
    addresses = resolve_addresses(hostname, port)
    if not addresses:
        raise OSError(f"{hostname!r} resolved to no address")
    if host_is_allowed(hostname, allowed_hosts):
        return addresses
    for ip in addresses:
        reason = blocked_reason(ip)
        if reason is not None:
            raise TargetRefused(
                f"refusing to reach {hostname!r}: it resolves to {ip}, which is {reason}; "
                "only allow-listed hosts are reached there (the tenant's "
                "webhook_allowed_hosts, set by the platform operator)"
            )
    return addresses
