"""Live-log streams on the real web tier (gunicorn with uvicorn workers, as `make run` and
compose run it): 200 open streams do not delay other requests, a tenant's streams are capped
(429 past the cap, another tenant unaffected), a closed stream gives its place back, and the
places of a killed web process free themselves when their leases end."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import urllib.error
import urllib.request
from urllib.parse import urlparse

import pytest
from django.test import override_settings

from scheduler_app.choices import ExecutionStatus
from scheduler_app.services.log_followers import log_followers_open_count
from tests.dashboard.conftest import add_execution
from tests.factories import make_task
from tests.processes import start_web, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

CAP = 200
# Renewed every third of it; generous, so a loaded machine never lets an open stream lapse.
LEASE_SECONDS = 10


def _token(base: str, username: str) -> str:
    request = urllib.request.Request(
        f"{base}/api/v1/auth/token",
        data=json.dumps({"username": username, "password": "pw-123456"}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["access"]


def _get(url: str, token: str | None = None) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=15) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


class Stream:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, status: int):
        self.reader, self.writer, self.status = reader, writer, status

    async def close(self) -> None:
        """Close the socket now (not whenever the loop or the garbage collector gets to it)."""
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


async def _close_all(streams: list[Stream]) -> None:
    await asyncio.gather(*(stream.close() for stream in streams))


async def _open(base: str, path: str, token: str) -> Stream:
    """A raw HTTP/1.1 request: the stream stays open as long as the socket does."""
    address = urlparse(base)
    reader, writer = await asyncio.open_connection(address.hostname, address.port)
    writer.write(
        f"GET {path} HTTP/1.1\r\nHost: {address.netloc}\r\nAccept: text/event-stream\r\n"
        f"Authorization: Bearer {token}\r\n\r\n".encode()
    )
    await writer.drain()
    status = int((await asyncio.wait_for(reader.readline(), 30)).split()[1])
    if status == 200:
        # Headers, then the stream's first comment: the stream runs.
        await asyncio.wait_for(reader.readuntil(b": following"), 30)
    return Stream(reader, writer, status)


def _with_server_password(user) -> None:
    """The web process runs the runtime settings, whose hashers do not read the test
    settings' fast MD5 hashes."""
    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.PBKDF2PasswordHasher"]):
        user.set_password("pw-123456")
        user.save(update_fields=["password"])


def _running_execution(tenant):
    task = make_task(tenant, name="chatty", schedule={"type": "manual"})
    return add_execution(task, minutes_ago=0.1, status=ExecutionStatus.RUNNING)


def test_open_streams_do_not_delay_other_requests_and_a_tenant_is_capped(tenant_factory):
    tenant, user = tenant_factory("acme")
    other, other_user = tenant_factory("globex")
    execution, foreign = _running_execution(tenant), _running_execution(other)
    _with_server_password(user)
    _with_server_password(other_user)
    web = start_web(
        env_overrides={
            "LOG_STREAMS_MAX_OPEN_PER_TENANT": str(CAP),
            "LOG_STREAMS_LEASE_SECONDS": str(LEASE_SECONDS),
        }
    )
    base = web.extra["url"]
    try:
        token, other_token = _token(base, user.username), _token(base, other_user.username)
        path = f"/api/v1/executions/{execution.id}/logs"

        async def scenario() -> None:
            # Opened ten at a time (viewers arrive, they do not all click at the same
            # instant): each opening runs the synchronous view on a thread with a database
            # connection of its own; an open stream holds neither.
            streams: list[Stream] = []
            while len(streams) < CAP:
                streams += await asyncio.gather(*(_open(base, path, token) for _ in range(10)))
            assert [s.status for s in streams] == [200] * CAP
            # One worker holds all of them, and still answers everything else.
            status, body = await asyncio.to_thread(_get, f"{base}/healthz")
            assert status == 200, body
            status, body = await asyncio.to_thread(
                _get, f"{base}/api/v1/executions/{execution.id}", token
            )
            assert status == 200 and json.loads(body)["status"] == "running"
            # Past the cap: 429, naming why; another tenant is not affected.
            refused = await _open(base, path, token)
            assert refused.status == 429
            body = await asyncio.wait_for(refused.reader.readuntil(b"}"), 30)
            assert b'"code": "too_many_log_streams"' in body
            await refused.close()
            theirs = await _open(base, f"/api/v1/executions/{foreign.id}/logs", other_token)
            assert theirs.status == 200
            await theirs.close()
            # A stream that closes gives its place back.
            await streams.pop().close()
            for _ in range(150):
                again = await _open(base, path, token)
                await again.close()
                if again.status == 200:
                    break
                await asyncio.sleep(0.2)
            assert again.status == 200
            await _close_all(streams)

        # On a thread of its own: a loop may already run in this one (Playwright's sync API).
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, scenario()).result()
        wait_until(
            lambda: log_followers_open_count(tenant_id=tenant.id) == 0,
            timeout=30,
            message="every closed stream to give its place back",
        )

        # A killed web process never closes its streams: their leases free the places.
        async def leave_open() -> list[Stream]:
            return list(await asyncio.gather(*(_open(base, path, token) for _ in range(5))))

        loop = asyncio.new_event_loop()
        try:
            kept = loop.run_until_complete(leave_open())
            assert log_followers_open_count(tenant_id=tenant.id) == 5
            web.kill()
            web.process.wait(timeout=30)
            wait_until(
                lambda: log_followers_open_count(tenant_id=tenant.id) == 0,
                timeout=LEASE_SECONDS * 6,
                message="the killed process's places to expire",
            )
            loop.run_until_complete(_close_all(kept))
        finally:
            loop.close()
    except AssertionError:
        print("\n".join(line for line in web.log().splitlines() if '" 200' not in line)[-8000:])
        raise
    finally:
        web.stop()
