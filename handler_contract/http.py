"""HTTP handler: one request per attempt, guarded against SSRF.

The worker runs it for `http` tasks (`run_http`); the server sends its own webhooks through
`post_json` (alerting), so both go through one guard (`handler_contract.ssrf`, which also has
`url_target_refused`, the check the API makes when a task or channel is saved).

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
    Every request goes through `handler_contract.ssrf`: the host is resolved once, refused if
    any address it resolves to is not public (unless allow-listed), and the connection is
    pinned to the checked address. Environment proxies are ignored, as a proxy would make the
    check meaningless.

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

import json
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import requests
import urllib3.exceptions
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
from handler_contract.ssrf import (
    IPAddress,
    PinnedAdapter,
    blocked_reason,
    host_is_allowed,
    resolve_addresses,
)

METHODS_WITH_DEFAULT_BODY = frozenset({"POST", "PUT", "PATCH"})
USER_AGENT = "task-scheduler-worker/1"
MAX_BODY_BYTES = 1024 * 1024
RESULT_BODY_CHARS = 64 * 1024
ERROR_BODY_CHARS = 500
POLL_INTERVAL_SECONDS = 0.05
# The helper thread reports its own socket timeouts; give it this long before we stop waiting.
DEADLINE_SLACK_SECONDS = 1.0


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
    if ctx.traceparent:
        # The platform's context wins over a configured one: the run's trace is the truth.
        headers["traceparent"] = ctx.traceparent
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
