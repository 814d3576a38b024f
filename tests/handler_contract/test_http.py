"""HTTP handler tests against a real local HTTP(S) server on 127.0.0.1."""

from __future__ import annotations

import ipaddress
import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from handler_contract.base import HandlerContext
from handler_contract.http import post_json, run_http
from handler_contract.ssrf import blocked_reason, host_is_allowed, url_target_refused
from workers.handlers import run_handler

pytestmark = pytest.mark.timeout(60)

LOCAL = ("127.0.0.1",)


class RecordingSink:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def write(self, stream: str, line: str) -> None:
        with self._lock:
            self.lines.append((stream, line))

    def stream(self, name: str) -> list[str]:
        return [line for stream, line in self.lines if stream == name]


def make_ctx(**overrides: Any) -> tuple[HandlerContext, RecordingSink]:
    sink = RecordingSink()
    values: dict[str, Any] = {
        "execution_id": "exec-42",
        "attempt": 2,
        "timeout_seconds": 10.0,
        "parameters": {"city": "Oslo"},
        "log": sink,
        "cancel_event": threading.Event(),
    }
    values.update(overrides)
    return HandlerContext(**values), sink


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._handle()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

    def _send(self, code: int, body: bytes, content_type: str, **headers: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, code: int, value: Any, **headers: str) -> None:
        self._send(code, json.dumps(value).encode(), "application/json", **headers)

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        record = {
            "method": self.command,
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": raw.decode(),
        }
        self.server.requests.append(record)
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        route = parts.path
        if route == "/json":
            self._json(200, {"ok": True, "method": self.command})
        elif route == "/echo":
            self._json(200, record)
        elif route == "/text":
            self._send(200, b"hello text", "text/plain; charset=utf-8")
        elif route == "/list":
            self._json(200, [1, 2, 3])
        elif route == "/big":
            self._send(200, b"x" * (2 * 1024 * 1024), "text/plain")
        elif route.startswith("/status/"):
            code = int(route.rsplit("/", 1)[1])
            extra = {"Retry_After": "7"} if code == 429 else {}
            self._send(code, f"status {code} body".encode(), "text/plain", **extra)
        elif route == "/redirect":
            self._send(302, b"", "text/plain", Location="/json")
        elif route == "/slow":
            time.sleep(float(query.get("secs", ["3"])[0]))
            self._json(200, {"slow": True})
        elif route == "/drip":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "100")
            self.end_headers()
            try:
                for _ in range(100):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.1)
            except OSError:
                pass
        else:
            self._send(404, b"no such route", "text/plain")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # do not wait for /slow handlers on shutdown

    def __init__(self, address: tuple[str, int]) -> None:
        super().__init__(address, _Handler)
        self.requests: list[dict[str, Any]] = []
        self.scheme = "http"

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"{self.scheme}://{host}:{self.server_address[1]}{path}"


def _serve(server: _Server) -> Iterator[_Server]:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def _module_server() -> Iterator[_Server]:
    yield from _serve(_Server(("127.0.0.1", 0)))


@pytest.fixture
def server(_module_server: _Server) -> _Server:
    _module_server.requests.clear()
    return _module_server


def http(url: str, **extra: Any) -> dict[str, Any]:
    return {"type": "http", "url": url, **extra}


# --- success and response handling -------------------------------------------------------


def test_post_sends_default_body_and_returns_json_object(server: _Server) -> None:
    ctx, sink = make_ctx(upstream_results={"extract": {"rows": 3}})
    outcome = run_http(http(server.url("/echo")), ctx, allowed_hosts=LOCAL)
    assert outcome.status == "success", outcome.error_message
    (request,) = server.requests
    assert request["method"] == "POST"
    assert json.loads(request["body"]) == {
        "parameters": {"city": "Oslo"},
        "execution_id": "exec-42",
        "attempt": 2,
        "upstream_results": {"extract": {"rows": 3}},
    }
    assert request["headers"]["content-type"] == "application/json"
    assert outcome.result is not None and outcome.result["method"] == "POST"
    system = sink.stream("system")
    assert f"POST {server.url('/echo')}" in system
    assert any(line.startswith("HTTP 200") for line in system)


def test_explicit_body_method_and_headers_are_sent_as_given(server: _Server) -> None:
    ctx, _ = make_ctx()
    config = http(
        server.url("/echo"),
        method="PUT",
        headers={"X-Custom": "yes", "Authorization": "Bearer abc"},
        body=[1, "two", None],
    )
    outcome = run_http(config, ctx, allowed_hosts=LOCAL)
    assert outcome.status == "success"
    (request,) = server.requests
    assert request["method"] == "PUT"
    assert json.loads(request["body"]) == [1, "two", None]
    assert request["headers"]["x-custom"] == "yes"
    assert request["headers"]["authorization"] == "Bearer abc"
    assert request["headers"]["host"] == f"127.0.0.1:{server.server_address[1]}"


def test_explicit_null_body_is_sent(server: _Server) -> None:
    ctx, _ = make_ctx()
    run_http(http(server.url("/echo"), body=None), ctx, allowed_hosts=LOCAL)
    assert server.requests[0]["body"] == "null"


def test_get_sends_no_default_body(server: _Server) -> None:
    ctx, _ = make_ctx()
    outcome = run_http(http(server.url("/json"), method="GET"), ctx, allowed_hosts=LOCAL)
    assert outcome.status == "success"
    assert outcome.result == {"ok": True, "method": "GET"}
    assert server.requests[0]["body"] == ""


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/text", {"status_code": 200, "body": "hello text"}),
        ("/list", {"status_code": 200, "body": "[1, 2, 3]"}),
    ],
)
def test_non_object_response_becomes_status_and_body(
    server: _Server, path: str, expected: dict[str, Any]
) -> None:
    ctx, _ = make_ctx()
    outcome = run_http(http(server.url(path), method="GET"), ctx, allowed_hosts=LOCAL)
    assert outcome.status == "success"
    assert outcome.result == expected


def test_large_body_is_cut_to_64_kib(server: _Server) -> None:
    ctx, _ = make_ctx()
    outcome = run_http(http(server.url("/big"), method="GET"), ctx, allowed_hosts=LOCAL)
    assert outcome.status == "success"
    assert outcome.result is not None
    assert len(outcome.result["body"]) == 64 * 1024
    assert outcome.result["body_truncated"] is True


# --- failures ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "error_class", "transient"),
    [
        (500, "http_5xx", True),
        (503, "http_5xx", True),
        (429, "http_429", True),
        (404, "http_4xx", False),
        (400, "http_4xx", False),
    ],
)
def test_error_statuses_are_classified(
    server: _Server, code: int, error_class: str, transient: bool
) -> None:
    ctx, sink = make_ctx()
    outcome = run_http(http(server.url(f"/status/{code}")), ctx, allowed_hosts=LOCAL)
    assert outcome.status == "failed"
    assert outcome.error_class == error_class
    assert outcome.transient is transient
    assert str(code) in outcome.error_message
    assert f"status {code} body" in outcome.error_message
    assert any(line.startswith(f"HTTP {code}") for line in sink.stream("system"))


def test_429_mentions_retry_after(server: _Server) -> None:
    ctx, _ = make_ctx()
    outcome = run_http(http(server.url("/status/429")), ctx, allowed_hosts=LOCAL)
    assert "Retry-After: 7" in outcome.error_message


def test_redirect_is_not_followed_and_fails_permanently(server: _Server) -> None:
    ctx, _ = make_ctx()
    outcome = run_http(http(server.url("/redirect"), method="GET"), ctx, allowed_hosts=LOCAL)
    assert outcome.status == "failed"
    assert outcome.error_class == "http_3xx"
    assert outcome.transient is False
    assert "/json" in outcome.error_message
    assert [r["path"] for r in server.requests] == ["/redirect"]


def test_expected_status_overrides_the_default_classification(server: _Server) -> None:
    ctx, _ = make_ctx()
    ok = run_http(http(server.url("/status/404"), expected_status=[404]), ctx, allowed_hosts=LOCAL)
    assert ok.status == "success"
    assert ok.result == {"status_code": 404, "body": "status 404 body"}

    unexpected = run_http(
        http(server.url("/json"), expected_status=[201]), ctx, allowed_hosts=LOCAL
    )
    assert unexpected.status == "failed"
    assert unexpected.error_class == "unexpected_status"
    assert unexpected.transient is False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_connection_refused_is_transient() -> None:
    ctx, _ = make_ctx()
    url = f"http://127.0.0.1:{_free_port()}/"
    outcome = run_http(http(url), ctx, allowed_hosts=LOCAL)
    assert outcome.status == "failed"
    assert outcome.error_class == "connection"
    assert outcome.transient is True


def test_slow_server_times_out_transiently(server: _Server) -> None:
    ctx, _ = make_ctx()
    started = time.monotonic()
    outcome = run_http(
        http(server.url("/slow?secs=5"), timeout_seconds=0.5), ctx, allowed_hosts=LOCAL
    )
    assert outcome.status == "failed"
    assert outcome.error_class == "timeout"
    assert outcome.transient is True
    assert time.monotonic() - started < 3


def test_task_timeout_bounds_a_server_that_trickles_its_body(server: _Server) -> None:
    # Every single read succeeds quickly; only the overall deadline can stop this.
    ctx, _ = make_ctx(timeout_seconds=1.0)
    started = time.monotonic()
    outcome = run_http(http(server.url("/drip"), method="GET"), ctx, allowed_hosts=LOCAL)
    assert outcome.status == "failed"
    assert outcome.error_class == "timeout"
    assert time.monotonic() - started < 4


def test_cancel_during_request_returns_quickly(server: _Server) -> None:
    ctx, _ = make_ctx()
    timer = threading.Timer(0.3, ctx.cancel_event.set)
    timer.start()
    started = time.monotonic()
    try:
        outcome = run_http(http(server.url("/slow?secs=5")), ctx, allowed_hosts=LOCAL)
    finally:
        timer.cancel()
    assert outcome.status == "cancelled"
    assert outcome.error_class == "cancelled"
    assert outcome.transient is False
    assert time.monotonic() - started < 2


def test_cancel_before_sending_sends_nothing(server: _Server) -> None:
    ctx, _ = make_ctx()
    ctx.cancel_event.set()
    outcome = run_http(http(server.url("/json")), ctx, allowed_hosts=LOCAL)
    assert outcome.status == "cancelled"
    assert server.requests == []


def test_secrets_are_masked_in_result_logs_and_errors(server: _Server) -> None:
    secret = "tok-9f8e7d6c5b4a"
    ctx, sink = make_ctx(secrets_to_mask=(secret,))
    outcome = run_http(http(server.url(f"/echo?token={secret}")), ctx, allowed_hosts=LOCAL)
    assert outcome.status == "success"
    assert secret in server.requests[0]["path"]  # the server did get the real value
    assert secret not in json.dumps(outcome.result)
    assert "****" in outcome.result["path"]
    assert secret not in json.dumps(sink.lines)

    failed = run_http(http(server.url(f"/status/500?token={secret}")), ctx, allowed_hosts=LOCAL)
    assert secret not in failed.error_message


# --- SSRF guard -------------------------------------------------------------------------


def test_loopback_is_refused_without_allowlist_and_nothing_is_sent(server: _Server) -> None:
    ctx, sink = make_ctx()
    outcome = run_http(http(server.url("/json")), ctx)
    assert outcome.status == "failed"
    assert outcome.error_class == "ssrf_blocked"
    assert outcome.transient is False
    assert "loopback" in outcome.error_message
    assert server.requests == []
    assert any("refusing" in line for line in sink.stream("system"))


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://169.254.169.254/latest/meta-data/", "metadata"),
        ("http://10.0.0.1/", "private"),
        ("http://192.168.1.10:8080/", "private"),
        ("http://[::1]:8080/", "loopback"),
        ("http://[::ffff:127.0.0.1]/", "loopback"),
        ("http://[::ffff:169.254.169.254]/", "metadata"),
        ("http://[fd00:ec2::254]/", "metadata"),
        ("http://100.100.100.200/", "metadata"),
        ("http://0.0.0.0/", "unspecified"),
        ("http://224.0.0.1/", "multicast"),
        ("http://2130706433/", "loopback"),  # 127.0.0.1 written as one integer
        ("http://localhost:8080/", "loopback"),
    ],
)
def test_internal_addresses_are_refused(url: str, reason: str) -> None:
    ctx, _ = make_ctx()
    outcome = run_http(http(url), ctx)
    assert outcome.status == "failed"
    assert outcome.error_class == "ssrf_blocked", outcome.error_message
    assert outcome.transient is False
    assert reason in outcome.error_message


def test_resolved_name_is_not_allowed_by_allowlisting_its_ip(server: _Server) -> None:
    ctx, _ = make_ctx()
    outcome = run_http(http(server.url("/json", host="localhost")), ctx, allowed_hosts=LOCAL)
    assert outcome.error_class == "ssrf_blocked"
    assert server.requests == []


def test_allowlisted_hostname_may_resolve_to_loopback(server: _Server) -> None:
    ctx, _ = make_ctx()
    outcome = run_http(
        http(server.url("/json", host="localhost")), ctx, allowed_hosts=("LOCALHOST.",)
    )
    assert outcome.status == "success", outcome.error_message
    assert server.requests[0]["headers"]["host"] == f"localhost:{server.server_address[1]}"


def _fake_addrinfo(*ips: str, port: int) -> list[tuple[Any, ...]]:
    result = []
    for ip in ips:
        family = socket.AF_INET6 if ":" in ip else socket.AF_INET
        sockaddr = (ip, port, 0, 0) if family == socket.AF_INET6 else (ip, port)
        result.append((family, socket.SOCK_STREAM, 6, "", sockaddr))
    return result


def test_refused_if_any_resolved_address_is_internal(
    server: _Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = socket.getaddrinfo

    def fake(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "mixed.example":
            return _fake_addrinfo("93.184.216.34", "127.0.0.1", port=port)
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    ctx, _ = make_ctx()
    outcome = run_http(http(server.url("/json", host="mixed.example")), ctx)
    assert outcome.error_class == "ssrf_blocked"
    assert "127.0.0.1" in outcome.error_message


def test_connection_is_pinned_to_the_checked_address(
    server: _Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second DNS answer (rebinding) must not matter: we connect to the first one."""
    real = socket.getaddrinfo
    lookups: list[str] = []

    def fake(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "rebind.example":
            lookups.append(host)
            # Any lookup after the checked one would send the request to a dead address.
            ip = "127.0.0.1" if len(lookups) == 1 else "127.0.0.2"
            return _fake_addrinfo(ip, port=port)
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    ctx, _ = make_ctx()
    outcome = run_http(
        http(server.url("/echo", host="rebind.example")), ctx, allowed_hosts=("rebind.example",)
    )
    assert outcome.status == "success", outcome.error_message
    assert lookups == ["rebind.example"]
    (request,) = server.requests
    assert request["headers"]["host"] == f"rebind.example:{server.server_address[1]}"


def test_unresolvable_host_fails_transiently() -> None:
    ctx, _ = make_ctx()
    outcome = run_http(http("http://does-not-exist.invalid/"), ctx)
    assert outcome.status == "failed"
    assert outcome.error_class == "dns"
    assert outcome.transient is True


@pytest.mark.parametrize(
    "ip",
    ["127.0.0.1", "10.1.2.3", "172.16.0.1", "169.254.1.1", "::1", "fe80::1", "fc00::1",
     "::ffff:10.0.0.1", "64:ff9b::7f00:1", "2002:7f00:1::", "100.64.0.1", "0.0.0.0", "::"],
)  # fmt: skip
def test_blocked_reason_flags_internal_addresses(ip: str) -> None:
    assert blocked_reason(ipaddress.ip_address(ip)) is not None


@pytest.mark.parametrize("ip", ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111"])
def test_blocked_reason_allows_public_addresses(ip: str) -> None:
    assert blocked_reason(ipaddress.ip_address(ip)) is None


def test_host_allowlist_matching() -> None:
    assert host_is_allowed("API.Example.com.", ["api.example.com"])
    assert host_is_allowed("::1", ["[0:0::1]"])
    assert not host_is_allowed("evil.example.com", ["example.com"])
    assert not host_is_allowed("localhost", ["127.0.0.1"])


def test_dispatcher_passes_the_allowlist(server: _Server) -> None:
    ctx, _ = make_ctx()
    assert run_handler(http(server.url("/json")), ctx).error_class == "ssrf_blocked"
    assert run_handler(http(server.url("/json")), ctx, allowed_hosts=LOCAL).status == "success"


# --- TLS: SNI and certificate checks use the name, the socket uses the pinned IP ----------


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[_Server, Path, list]]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is needed to make a test certificate")
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=secure.example",
         "-addext", "subjectAltName=DNS:secure.example"],
        check=True,
        capture_output=True,
    )  # fmt: skip
    server = _Server(("127.0.0.1", 0))
    server.scheme = "https"
    sni_names: list[str | None] = []
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.sni_callback = lambda sock, name, ctx: sni_names.append(name)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    for running in _serve(server):
        yield running, cert, sni_names


def _resolve_secure_example(monkeypatch: pytest.MonkeyPatch) -> None:
    real = socket.getaddrinfo

    def fake(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "secure.example":
            return _fake_addrinfo("127.0.0.1", port=port)
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", fake)


def test_https_uses_hostname_for_sni_and_certificate(
    tls_server: tuple[_Server, Path, list], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, cert, sni_names = tls_server
    server.requests.clear()
    sni_names.clear()
    _resolve_secure_example(monkeypatch)
    ctx, _ = make_ctx()
    outcome = run_http(
        http(server.url("/json", host="secure.example")),
        ctx,
        allowed_hosts=("secure.example",),
        ca_bundle=str(cert),
    )
    assert outcome.status == "success", outcome.error_message
    assert sni_names == ["secure.example"]
    assert server.requests[0]["headers"]["host"] == f"secure.example:{server.server_address[1]}"


def test_https_with_untrusted_certificate_fails_permanently(
    tls_server: tuple[_Server, Path, list], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, _cert, _sni = tls_server
    _resolve_secure_example(monkeypatch)
    ctx, _ = make_ctx()
    outcome = run_http(
        http(server.url("/json", host="secure.example")), ctx, allowed_hosts=("secure.example",)
    )
    assert outcome.status == "failed"
    assert outcome.error_class == "tls"
    assert outcome.transient is False


@pytest.mark.parametrize(
    ("url", "allowed", "refused"),
    [
        ("http://169.254.169.254/latest/", (), "cloud metadata"),
        ("http://[fd00:ec2::254]/", (), "cloud metadata"),
        ("http://10.1.2.3:8080/x", (), "private"),
        ("http://[::ffff:127.0.0.1]/", (), "loopback"),
        ("http://api.localhost/", (), "loopback"),
        ("http://LOCALHOST./", (), "loopback"),
        ("http://127.0.0.1:9000/", ("127.0.0.1",), None),
        ("http://localhost/", ("localhost",), None),
        ("https://hooks.example.com/x", (), None),  # names: checked when the request is made
        ("https://93.184.216.34/", (), None),
    ],
)
def test_save_time_check_refuses_literal_internal_targets(url, allowed, refused):
    """What the API refuses when a task is saved: no DNS lookup, literal addresses only."""
    reason = url_target_refused(url, allowed)
    assert (reason is None) if refused is None else (refused in reason)


# --- post_json: the server's own webhooks, through the same guard ---------------------------


def test_post_json_sends_the_body_and_headers_as_given(server: _Server) -> None:
    outcome = post_json(
        server.url("/echo"),
        {"event": "failure"},
        headers={"X-Scheduler-Event": "failure"},
        timeout_seconds=5,
        allowed_hosts=LOCAL,
    )
    assert outcome.succeeded, outcome.error_message
    (request,) = server.requests
    assert request["method"] == "POST"
    assert json.loads(request["body"]) == {"event": "failure"}
    assert request["headers"]["x-scheduler-event"] == "failure"


def test_post_json_refuses_a_private_target_unless_allow_listed(server: _Server) -> None:
    refused = post_json(server.url("/json"), {"a": 1}, timeout_seconds=5)
    assert refused.error_class == "ssrf_blocked"
    assert not refused.transient
    assert server.requests == []
    by_name = post_json(
        server.url("/json", host="localhost"), {"a": 1}, timeout_seconds=5, allowed_hosts=LOCAL
    )
    assert by_name.error_class == "ssrf_blocked"  # an address a name resolves to is not listed
    assert server.requests == []
