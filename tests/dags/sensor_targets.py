"""Real targets for the sensor tests: an HTTP server, an S3 API (moto's server mode, as a
subprocess on a free port) and a PostgreSQL database of a "tenant", each on 127.0.0.1.
Context managers; the tests wrap them in fixtures of their own."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psycopg

from tests.processes import wait_until

MOTO_KEYS = {"aws_access_key_id": "sensor-test-key", "aws_secret_access_key": "sensor-test-secret"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class HttpTarget:
    """Answers GET with `status` and `body` (JSON); counts the requests it received."""

    port: int
    status: int = 503
    body: object = field(default_factory=lambda: {"state": "starting"})
    requests: int = 0
    delay: float = 0.0  # seconds before it answers (a slow or hanging service)
    first_request_at: float | None = None  # time.monotonic() of the first request

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/health"


class _Server(ThreadingHTTPServer):
    # A slow answer still in flight when the test ends is dropped, not waited for; a client
    # that gave up on one (a poke's timeout) is no error of the test's.
    block_on_close = False

    def handle_error(self, request, client_address):
        pass


@contextlib.contextmanager
def http_target_serving():
    target = HttpTarget(port=0)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            target.requests += 1
            if target.first_request_at is None:
                target.first_request_at = time.monotonic()
            if target.delay:
                time.sleep(target.delay)  # the slow service this target plays
            payload = json.dumps(target.body).encode()
            self.send_response(target.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    server = _Server(("127.0.0.1", 0), Handler)
    target.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield target
    server.shutdown()
    server.server_close()


@dataclass
class S3Api:
    endpoint_url: str

    def client(self):
        import boto3

        return boto3.client(
            "s3", endpoint_url=self.endpoint_url, region_name="us-east-1", **MOTO_KEYS
        )


@contextlib.contextmanager
def moto_s3_serving():
    """moto's S3 server, a real HTTP S3 API, in a process of its own."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def listening() -> bool:
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", port)) == 0

    try:
        wait_until(listening, timeout=30, message="moto's S3 server to listen")
        yield S3Api(endpoint_url=f"http://127.0.0.1:{port}")
    finally:
        process.terminate()
        process.wait(timeout=10)


@dataclass
class TenantDatabase:
    name: str

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:5432/{self.name}"

    def execute(self, sql: str) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as connection:
            connection.execute(sql)


@contextlib.contextmanager
def tenant_database_created():
    """A database on the test server that stands for a tenant's own."""
    name = f"sensor_target_{uuid.uuid4().hex[:10]}"
    admin = "postgresql://postgres@127.0.0.1:5432/postgres"
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    database = TenantDatabase(name=name)
    database.execute("CREATE TABLE schema_migrations (version text PRIMARY KEY)")
    yield database
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
