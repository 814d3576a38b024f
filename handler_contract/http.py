"""HTTP handler: one request per attempt, guarded against SSRF.

The worker runs it for `http` tasks (`run_http`); the server sends its own webhooks through
`post_json` (alerting), so both go through one guard. `url_target_refused` is the check the
API makes when a task or channel is saved.

Request body
    An explicit ``body`` in the config is sent as JSON exactly as given (``null`` included).
    Without one, POST/PUT/PATCH send ``{"parameters": ..., "execution_id": ..., "attempt": ...,
    "upstream_results": ...}``; GET and DELETE send no body, since many servers and proxies
    reject or drop bodies on those methods.

Timeouts
    The effective timeout is the smaller of the config's ``timeout_seconds`` and the task's
    ``ctx.timeout_seconds``. It is applied to connect and to each read, and the whole exchange
    (including reading the body) is also bounded by it, so a server that trickles bytes cannot
    hold the worker. An expired timeout is reported as status "failed", error_class "timeout",
    transient, like the other network failures.

SSRF guard
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
    Environment proxies are ignored, as a proxy would make the check meaningless.

Redirects
    Never followed. A 3xx is a permanent failure ("http_3xx", the Location is in the message)
    unless the status is listed in ``expected_status``. Following would require re-running the
    SSRF check for every hop; tasks should call the final URL instead.

Cancellation
    Checked before sending. During the exchange the request runs on a helper thread and the
    handler stops waiting as soon as the cancel event is set (or the deadline passes); the
    helper thread ends by itself at the latest when the socket timeout expires. A request that
    has already reached the server cannot be taken back.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import requests
import urllib3.exceptions
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict

from handler_contract.base import (
    STATUS_CANCELLED,
    STATUS_FAILED,
    STATUS_SUCCESS,
    BufferedLogSink,
    HandlerContext,
    HandlerOutcome,
    LogSink,
    clip,
    loads_strict,
    mask_outcome,
    masking_sink,
)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

METHODS_WITH_DEFAULT_BODY = frozenset({"POST", "PUT", "PATCH"})
USER_AGENT = "task-scheduler-worker/1"
MAX_BODY_BYTES = 1024 * 1024
RESULT_BODY_CHARS = 64 * 1024
ERROR_BODY_CHARS = 500
POLL_INTERVAL_SECONDS = 0.05
# The helper thread reports its own socket timeouts; give it this long before we stop waiting.
DEADLINE_SLACK_SECONDS = 1.0

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


@dataclass
class _Exchange:
    """What the helper thread hands back to the handler."""

    done: threading.Event = field(default_factory=threading.Event)
    status_code: int = 0
    reason: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    body_truncated: bool = False
    # Reading stopped early because of the deadline or a cancel, not because of the size cap.
    interrupted: bool = False
    encoding: str | None = None
    error: BaseException | None = None
    elapsed: float = 0.0
    # Set when the handler stopped waiting; the helper thread must not log after that.
    abandoned: bool = False


def run_http(
    config: dict[str, Any],
    ctx: HandlerContext,
    *,
    allowed_hosts: Collection[str] = (),
    ca_bundle: str | None = None,
) -> HandlerOutcome:
    """Perform the configured request. ``ca_bundle`` overrides the CA file used for TLS."""
    return mask_outcome(_run_http(config, ctx, allowed_hosts, ca_bundle), ctx.secrets_to_mask)


def post_json(
    url: str,
    body: Any,
    *,
    headers: dict[str, str] | None = None,
    timeout_seconds: float,
    allowed_hosts: Collection[str] = (),
    log_bytes: int = 64 * 1024,
) -> HandlerOutcome:
    """POST ``body`` as JSON to ``url`` through the same SSRF guard, pinning and timeouts as
    the http handler, for the server's own calls (alerting webhooks). Nothing cancels it but
    its timeout; what it would have logged is dropped. The outcome reads like a handler's:
    ``succeeded``, ``result`` (the receiver's JSON object, or its status and body), and
    ``error_class``/``error_message``/``transient`` on failure."""
    ctx = HandlerContext(
        execution_id="post",
        attempt=1,
        timeout_seconds=timeout_seconds,
        parameters={},
        log=BufferedLogSink(log_bytes),
        cancel_event=threading.Event(),
    )
    config = {"url": url, "method": "POST", "body": body, "headers": dict(headers or {})}
    return run_http(config, ctx, allowed_hosts=allowed_hosts)


def _fail(error_class: str, message: str, *, transient: bool, **extra: Any) -> HandlerOutcome:
    return HandlerOutcome(
        status=STATUS_FAILED,
        error_class=error_class,
        error_message=clip(message),
        transient=transient,
        **extra,
    )


def _run_http(
    config: dict[str, Any],
    ctx: HandlerContext,
    allowed_hosts: Collection[str],
    ca_bundle: str | None,
) -> HandlerOutcome:
    log = masking_sink(ctx)
    if ctx.cancel_event.is_set():
        return _cancelled("cancelled before the request was sent")

    url = str(config.get("url", ""))
    method = str(config.get("method", "POST")).upper()
    try:
        parts = urlsplit(url)
        hostname = parts.hostname or ""
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    except ValueError as exc:
        return _fail("invalid_config", f"handler.url: {exc}", transient=False)
    if parts.scheme.lower() not in ("http", "https") or not hostname:
        return _fail("invalid_config", "handler.url must be an http(s) URL", transient=False)

    timeout = float(ctx.timeout_seconds)
    if config.get("timeout_seconds") is not None:
        timeout = min(timeout, float(config["timeout_seconds"]))

    try:
        addresses = resolve_addresses(hostname, port)
    except (OSError, UnicodeError, ValueError) as exc:
        return _fail("dns", f"could not resolve {hostname!r}: {exc}", transient=True)
    if not addresses:
        return _fail("dns", f"{hostname!r} resolved to no address", transient=True)

    if not host_is_allowed(hostname, allowed_hosts):
        for ip in addresses:
            reason = blocked_reason(ip)
            if reason is not None:
                message = (
                    f"refusing to call {hostname!r}: it resolves to {ip}, which is {reason}; "
                    "only allow-listed hosts are reached there (a tenant's: its "
                    "webhook_allowed_hosts, set by the platform operator)"
                )
                log.write("system", message)
                return _fail("ssrf_blocked", message, transient=False)

    headers: CaseInsensitiveDict[str] = CaseInsensitiveDict({"User-Agent": USER_AGENT})
    headers.update(config.get("headers") or {})
    data: bytes | None = None
    if "body" in config:
        data = json.dumps(config["body"]).encode("utf-8")
    elif method in METHODS_WITH_DEFAULT_BODY:
        default_body = {
            "parameters": ctx.parameters,
            "execution_id": ctx.execution_id,
            "attempt": ctx.attempt,
            "upstream_results": ctx.upstream_results,
        }
        data = json.dumps(default_body, default=str).encode("utf-8")
    if data is not None and "Content-Type" not in headers:
        headers["Content-Type"] = "application/json"

    host_header = _host_header(hostname, parts.port)
    log.write("system", f"{method} {url}")
    exchange = _Exchange()
    deadline = time.monotonic() + timeout
    thread = threading.Thread(
        target=_exchange,
        args=(exchange, method, url, dict(headers), data, addresses, hostname, host_header),
        kwargs={
            "timeout": timeout,
            "deadline": deadline,
            "ctx": ctx,
            "log": log,
            "verify": ca_bundle or True,
        },
        name=f"http-handler-{ctx.execution_id}",
        daemon=True,
    )
    thread.start()
    while not exchange.done.wait(POLL_INTERVAL_SECONDS):
        if ctx.cancel_event.is_set():
            exchange.abandoned = True
            log.write("system", "cancel requested: abandoning the request")
            return _cancelled("cancelled while the request was in flight")
        if time.monotonic() > deadline + DEADLINE_SLACK_SECONDS:
            exchange.abandoned = True
            log.write("system", f"no complete response within {timeout:g}s")
            return _fail("timeout", f"{method} {url} timed out after {timeout:g}s", transient=True)

    if exchange.error is not None:
        return _classify_error(exchange.error, method, url, timeout, log)
    if ctx.cancel_event.is_set():
        return _cancelled("cancelled while the response was being read")
    if exchange.interrupted:
        return _fail(
            "timeout", f"{method} {url}: response body not read within {timeout:g}s", transient=True
        )
    return _classify_response(exchange, config, method, url, log)


def _host_header(hostname: str, port: int | None) -> str:
    try:
        host = hostname.encode("idna").decode("ascii")
    except UnicodeError:
        host = hostname
    if ":" in host:
        host = f"[{host}]"
    return host if port is None else f"{host}:{port}"


def _exchange(
    exchange: _Exchange,
    method: str,
    url: str,
    headers: dict[str, str],
    data: bytes | None,
    addresses: list[IPAddress],
    hostname: str,
    host_header: str,
    *,
    timeout: float,
    deadline: float,
    ctx: HandlerContext,
    log: LogSink,
    verify: bool | str,
) -> None:
    started = time.monotonic()
    try:
        for index, ip in enumerate(addresses):
            if exchange.abandoned:
                return
            session = requests.Session()
            session.trust_env = False  # no proxies or .netrc from the worker's environment
            adapter = PinnedAdapter(ip, hostname, host_header)
            session.mount("http://", adapter)
            session.mount("https://", adapter)
            try:
                with session.request(
                    method,
                    url,
                    headers=headers,
                    data=data,
                    timeout=(timeout, timeout),
                    allow_redirects=False,
                    stream=True,
                    verify=verify,
                ) as response:
                    _read_response(exchange, response, deadline, ctx)
                return
            except requests.exceptions.ConnectionError as exc:
                if index + 1 < len(addresses) and _connect_failed(exc):
                    if not exchange.abandoned:
                        log.write("system", f"could not connect to {ip}; trying the next address")
                    continue
                raise
            finally:
                session.close()
    except BaseException as exc:  # handed to the waiting handler, which classifies it
        exchange.error = exc
    finally:
        exchange.elapsed = time.monotonic() - started
        exchange.done.set()


def _connect_failed(exc: requests.exceptions.ConnectionError) -> bool:
    """True if the request never left this host (so trying another address is safe)."""
    if isinstance(exc, requests.exceptions.ConnectTimeout | requests.exceptions.SSLError):
        return False
    reason = getattr(exc.args[0], "reason", None) if exc.args else None
    return isinstance(reason, urllib3.exceptions.NewConnectionError)


def _read_response(
    exchange: _Exchange, response: requests.Response, deadline: float, ctx: HandlerContext
) -> None:
    exchange.status_code = response.status_code
    exchange.reason = response.reason or ""
    exchange.headers = {k: v for k, v in response.headers.items() if len(v) < 2048}
    exchange.encoding = response.encoding
    body = bytearray()
    for chunk in response.iter_content(64 * 1024):
        if len(body) + len(chunk) > MAX_BODY_BYTES:
            body += chunk[: MAX_BODY_BYTES - len(body)]
            exchange.body_truncated = True
            break
        body += chunk
        if ctx.cancel_event.is_set() or time.monotonic() > deadline:
            exchange.interrupted = True
            break
    exchange.body = bytes(body)


def _decode(body: bytes, encoding: str | None) -> str:
    try:
        return body.decode(encoding or "utf-8", "replace")
    except LookupError:
        return body.decode("utf-8", "replace")


def _classify_response(
    exchange: _Exchange, config: dict[str, Any], method: str, url: str, log: LogSink
) -> HandlerOutcome:
    code = exchange.status_code
    log.write(
        "system",
        f"HTTP {code} {exchange.reason} after {exchange.elapsed:.2f}s "
        f"({len(exchange.body)} bytes{', truncated' if exchange.body_truncated else ''})",
    )
    text = _decode(exchange.body, exchange.encoding)
    expected = config.get("expected_status")
    ok = code in expected if expected else 200 <= code < 300
    if ok:
        result: dict[str, Any] | None = None
        if not exchange.body_truncated and exchange.body:
            try:
                parsed = loads_strict(exchange.body)
            except ValueError:
                parsed = None
            if isinstance(parsed, dict):
                result = parsed
        if result is None:
            result = {"status_code": code, "body": text[:RESULT_BODY_CHARS]}
            if exchange.body_truncated or len(text) > RESULT_BODY_CHARS:
                result["body_truncated"] = True
        return HandlerOutcome(status=STATUS_SUCCESS, result=result)

    snippet = text[:ERROR_BODY_CHARS].strip()
    message = f"{method} {url} returned HTTP {code} {exchange.reason}".rstrip()
    retry_after = exchange.headers.get("Retry-After")
    if retry_after:
        message += f" (Retry-After: {retry_after})"
    if 300 <= code < 400:
        location = exchange.headers.get("Location", "")
        message += f"; redirect to {location!r} not followed" if location else ""
    if snippet:
        message += f": {snippet}"
    result = {"status_code": code, "body": text[:RESULT_BODY_CHARS]}

    if 200 <= code < 300:
        return _fail("unexpected_status", message, transient=False, result=result)
    if code == 429:
        return _fail("http_429", message, transient=True, result=result)
    if code >= 500:
        return _fail("http_5xx", message, transient=True, result=result)
    if 400 <= code < 500:
        return _fail("http_4xx", message, transient=False, result=result)
    if 300 <= code < 400:
        return _fail("http_3xx", message, transient=False, result=result)
    return _fail("unexpected_status", message, transient=False, result=result)


def _classify_error(
    exc: BaseException, method: str, url: str, timeout: float, log: LogSink
) -> HandlerOutcome:
    prefix = f"{method} {url}"
    log.write("system", f"request failed: {type(exc).__name__}: {exc}")
    if isinstance(exc, requests.exceptions.Timeout) or _is_read_timeout(exc):
        return _fail("timeout", f"{prefix} timed out after {timeout:g}s", transient=True)
    if isinstance(exc, requests.exceptions.SSLError):
        # Certificate problems are configuration problems; retrying soon will not fix them.
        return _fail("tls", f"{prefix}: TLS error: {exc}", transient=False)
    if isinstance(
        exc,
        requests.exceptions.InvalidURL
        | requests.exceptions.InvalidHeader
        | requests.exceptions.InvalidSchema
        | requests.exceptions.MissingSchema,
    ):
        return _fail("invalid_request", f"{prefix}: {exc}", transient=False)
    if isinstance(exc, requests.exceptions.RequestException):
        return _fail("connection", f"{prefix}: connection failed: {exc}", transient=True)
    return _fail(
        f"exception:{type(exc).__name__}", f"{prefix}: {type(exc).__name__}: {exc}", transient=True
    )


def _is_read_timeout(exc: BaseException) -> bool:
    # requests wraps a read timeout hit while streaming the body in a plain ConnectionError.
    return bool(
        isinstance(exc, requests.exceptions.ConnectionError)
        and exc.args
        and isinstance(exc.args[0], urllib3.exceptions.ReadTimeoutError)
    )


def _cancelled(message: str) -> HandlerOutcome:
    return HandlerOutcome(
        status=STATUS_CANCELLED, error_class="cancelled", error_message=message, transient=False
    )
