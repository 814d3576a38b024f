"""The SSRF guard every outbound request of the platform goes through: which addresses are
refused, and the adapter that pins a connection to the address that was checked.

The http handler (`handler_contract.http`) and the server's own webhooks (`post_json`, for
alerting) connect through it; `url_target_refused` is the check the API makes when a task or
channel is saved, without a DNS lookup.

The host is resolved once with ``getaddrinfo``. If *any* address is loopback, private,
link-local, reserved, multicast, unspecified, not globally routable or a cloud metadata
address (IPv4-mapped, NAT64 and 6to4 IPv6 forms are unwrapped and checked too), the request
is refused (failed, permanent, "ssrf_blocked") unless the URL's host name or literal IP is
in ``allowed_hosts``. An address a name resolves to does not count as allow-listed: listing
"127.0.0.1" does not allow "localhost".

The connection is then pinned to the checked address: the connection pool connects to that
IP while the request carries the original ``Host`` header and TLS uses the original name
for SNI and certificate verification. A DNS answer that changes between check and connect
(DNS rebinding) therefore cannot redirect the request. Only if connecting to one checked
address is refused/unreachable is the next checked address tried (nothing was sent yet).
Environment proxies are ignored (`http`: `trust_env = False`), as a proxy would make the check
meaningless.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Collection
from typing import Any
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)
_NAT64_PREFIX = ipaddress.ip_network("64:ff9b::/96")


def blocked_reason(ip: IPAddress) -> str | None:
    """Why connecting to ``ip`` is refused, or None if it is a public address."""
    embedded: list[ipaddress.IPv4Address] = []
    if isinstance(ip, ipaddress.IPv6Address):
        # IPv6 forms that embed an IPv4 address reach that IPv4 address.
        if ip.ipv4_mapped is not None:
            embedded.append(ip.ipv4_mapped)
        if ip.sixtofour is not None:
            embedded.append(ip.sixtofour)
        if ip in _NAT64_PREFIX:
            embedded.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    for candidate in embedded:
        reason = _address_reason(candidate)
        if reason is not None:
            return f"{reason} ({candidate} embedded in an IPv6 address)"
    return _address_reason(ip)


def _address_reason(ip: IPAddress) -> str | None:
    if ip in METADATA_ADDRESSES:
        return "a cloud metadata address"
    checks = (
        (ip.is_loopback, "a loopback address"),
        (ip.is_unspecified, "an unspecified address"),
        (ip.is_link_local, "a link-local address"),
        (ip.is_multicast, "a multicast address"),
        (ip.is_private, "a private address"),
        (ip.is_reserved, "a reserved address"),
        (getattr(ip, "is_site_local", False), "a site-local address"),
        (not ip.is_global, "not a globally routable address"),
    )
    for flagged, reason in checks:
        if flagged:
            return reason
    return None


def _normalize_host(host: str) -> str:
    return host.strip().strip("[]").rstrip(".").lower()


def host_is_allowed(hostname: str, allowed_hosts: Collection[str]) -> bool:
    name = _normalize_host(hostname)
    name_ip = _parse_ip(name)
    for entry in allowed_hosts:
        candidate = _normalize_host(entry)
        if candidate == name:
            return True
        if name_ip is not None and _parse_ip(candidate) == name_ip:
            return True
    return False


def _parse_ip(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _is_localhost_name(name: str) -> bool:
    # RFC 6761: "localhost" and every name under it are loopback, whatever DNS says.
    return name == "localhost" or name.endswith(".localhost")


def url_target_refused(url: str, allowed_hosts: Collection[str]) -> str | None:
    """Why a task may not be saved with ``url``, judged without a DNS lookup: a literal IP
    the guard would refuse, or a localhost name, unless the host is allow-listed. Other
    names are resolved and checked when the request is made (the guard above)."""
    hostname = urlsplit(url).hostname or ""
    if not hostname or host_is_allowed(hostname, allowed_hosts):
        return None
    name = _normalize_host(hostname)
    if _is_localhost_name(name):
        return f"{hostname} is a loopback address"
    ip = _parse_ip(name)
    reason = blocked_reason(ip) if ip is not None else None
    return f"{hostname} is {reason}" if reason else None


def resolve_addresses(hostname: str, port: int) -> list[IPAddress]:
    infos = socket.getaddrinfo(hostname, port, type=socket.SOCK_STREAM)
    addresses: list[IPAddress] = []
    for _family, _type, _proto, _canon, sockaddr in infos:
        ip = ipaddress.ip_address(str(sockaddr[0]))
        if ip not in addresses:
            addresses.append(ip)
    return addresses


class PinnedAdapter(HTTPAdapter):
    """Connects to a fixed, already-checked IP while keeping the URL's host for Host/SNI."""

    def __init__(self, ip: IPAddress, hostname: str, host_header: str) -> None:
        self._ip = str(ip)
        self._hostname = hostname
        self._host_header = host_header
        super().__init__(pool_connections=1, pool_maxsize=1, max_retries=0)

    def build_connection_pool_key_attributes(
        self, request: requests.PreparedRequest, verify: Any, cert: Any = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        host_params, pool_kwargs = super().build_connection_pool_key_attributes(
            request, verify, cert
        )
        host_params["host"] = self._ip
        if host_params.get("scheme") == "https":
            # SNI and certificate verification must use the name the task asked for.
            pool_kwargs["server_hostname"] = self._hostname
        return host_params, pool_kwargs

    def add_headers(self, request: requests.PreparedRequest, **kwargs: Any) -> None:
        request.headers["Host"] = self._host_header
