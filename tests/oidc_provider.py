"""A real OpenID Connect provider for the single sign-on tests (tests/fixtures/oidc_provider/:
django-oauth-toolkit), started as its own process on a free port with its own PostgreSQL
database, created here and dropped when it stops.

Users (password PROVIDER_PASSWORD) and their groups: olivia in `ops`, victor in `viewers`,
mallory in `beta-ops` (tenant B's operators), nora in no group. Clients: `scheduler`
(confidential, authorization code with PKCE: the dashboard's), `scheduler-cli` (password
grant: scripts' API tokens, accepted audience), `other-app` (password grant, an audience
the scheduler does not accept).
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import jwt
import psycopg
import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwcrypto import jwk

from tests.processes import ROOT, wait_until

PROVIDER_PASSWORD = "provider-pw-123"
CLIENT_SECRET = "scheduler-client-secret"
USERS = {"olivia": ["ops"], "victor": ["viewers"], "mallory": ["beta-ops"], "nora": []}
CLIENTS = [
    {"client_id": "scheduler", "client_secret": CLIENT_SECRET, "grant": "authorization-code"},
    {"client_id": "scheduler-cli", "client_secret": CLIENT_SECRET, "grant": "password"},
    {"client_id": "other-app", "client_secret": CLIENT_SECRET, "grant": "password"},
]
# How the scheduler maps the fixture's groups: `demo` is the tenant `make run` seeds.
GROUP_ROLES = "ops=demo:operator,viewers=demo:viewer,admins=demo:admin,beta-ops=beta:operator"


def private_key_pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Provider:
    base: str
    issuer: str
    key_pem: str
    database: str

    @property
    def kid(self) -> str:
        return jwk.JWK.from_pem(self.key_pem.encode()).thumbprint()

    def settings(self, **overrides: object) -> dict[str, object]:
        """The scheduler's OIDC_* settings for this provider (override_settings)."""
        values: dict[str, object] = {
            "OIDC_ISSUER": self.issuer,
            "OIDC_ENABLED": True,
            "OIDC_DISCOVERY_URL": f"{self.issuer}/.well-known/openid-configuration",
            "OIDC_RP_CLIENT_ID": "scheduler",
            "OIDC_RP_CLIENT_SECRET": CLIENT_SECRET,
            "OIDC_API_AUDIENCES": ["scheduler", "scheduler-cli"],
        }
        values.update(overrides)
        return values

    def env(self) -> dict[str, str]:
        """The same, as the environment of `make run` (docs/operations/sso.md)."""
        return {
            "OIDC_ISSUER": self.issuer,
            "OIDC_CLIENT_ID": "scheduler",
            "OIDC_CLIENT_SECRET": CLIENT_SECRET,
            "OIDC_API_AUDIENCES": "scheduler,scheduler-cli",
            "OIDC_GROUP_ROLES": GROUP_ROLES,
            "OIDC_PROVIDER_NAME": "Fixture IdP",
        }

    def password_token(self, username: str, *, client_id: str = "scheduler-cli") -> str:
        """An access token of the provider for `username`, as a script gets one."""
        response = requests.post(
            f"{self.issuer}/token/",
            data={
                "grant_type": "password",
                "username": username,
                "password": PROVIDER_PASSWORD,
                "scope": "openid profile email",
            },
            auth=(client_id, CLIENT_SECRET),
            timeout=10,
        )
        response.raise_for_status()
        return response.json()["access_token"]

    def signed(self, claims: dict, *, key_pem: str | None = None, kid: str | None = None) -> str:
        """A JWT signed with the provider's own key (or another), for the attacks the
        provider would never issue: an expired token, a wrong audience, another issuer."""
        now = int(time.time())
        body = {"iss": self.issuer, "sub": "1", "aud": "scheduler", "iat": now, "exp": now + 300}
        body.update(claims)
        headers = {"kid": kid or self.kid}
        return jwt.encode(body, key_pem or self.key_pem, algorithm="RS256", headers=headers)

    def redirect_uri_add(self, uri: str) -> None:
        """A dashboard's callback, registered once its address is known (the stack's port;
        the test client's `testserver`)."""
        with psycopg.connect(_admin_dsn(self.database), autocommit=True) as connection:
            connection.execute(
                "UPDATE oauth2_provider_application"
                " SET redirect_uris = trim(redirect_uris || ' ' || %s)"
                " WHERE client_id = 'scheduler'",
                (uri,),
            )

    def sign_in_for_code(self, authorize_url: str, username: str, redirect_uri: str) -> str:
        """What a browser does at the provider (its login form, then the authorization
        endpoint) until it is sent back: the callback URL with the code and state."""
        session = requests.Session()
        url = authorize_url
        for _ in range(10):
            response = session.get(url, allow_redirects=False, timeout=10)
            if response.status_code == 200 and "csrfmiddlewaretoken" in response.text:
                csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', response.text)
                next_url = re.search(r'name="next" value="([^"]*)"', response.text)
                response = session.post(
                    url,
                    data={
                        "csrfmiddlewaretoken": csrf.group(1),
                        "username": username,
                        "password": PROVIDER_PASSWORD,
                        "next": html.unescape(next_url.group(1)),
                    },
                    allow_redirects=False,
                    timeout=10,
                )
            location = response.headers.get("Location", "")
            if location.startswith(redirect_uri):
                return location
            if not location:
                raise AssertionError(f"the provider stopped at {url}: {response.status_code}")
            url = urllib.parse.urljoin(url, location)
        raise AssertionError("the provider never sent the browser back")


def _admin_dsn(database: str = "postgres") -> str:
    return f"host=127.0.0.1 port=5432 user=postgres dbname={database}"


@contextlib.contextmanager
def running_provider() -> Iterator[Provider]:
    database = f"oidc_provider_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(_admin_dsn(), autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{database}"')
    port = free_port()
    issuer = f"http://127.0.0.1:{port}/o"
    key_pem = private_key_pem()
    workdir = Path(tempfile.mkdtemp(prefix="oidc-provider-"))
    key_file = workdir / "key.pem"
    key_file.write_text(key_pem)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "OIDC_", "PYTEST_"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE="tests.fixtures.oidc_provider.settings",
        PROVIDER_ISSUER=issuer,
        PROVIDER_KEY_FILE=str(key_file),
        PROVIDER_DATABASE=database,
        PROVIDER_SEED=json.dumps(
            {"users": USERS, "clients": CLIENTS, "password": PROVIDER_PASSWORD}
        ),
    )
    log = (workdir / "provider.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.fixtures.oidc_provider.serve", str(port)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    try:
        wait_until(
            lambda: process.poll() is not None or _answers(f"{issuer}/.well-known/jwks.json"),
            timeout=60,
            interval=0.1,
            message="the OIDC provider to serve its keys",
        )
        if process.poll() is not None:
            raise AssertionError((workdir / "provider.log").read_text(errors="replace"))
        yield Provider(
            base=f"http://127.0.0.1:{port}", issuer=issuer, key_pem=key_pem, database=database
        )
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        with psycopg.connect(_admin_dsn(), autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=1).status_code == 200
    except requests.RequestException:
        return False


@pytest.fixture(scope="session")
def oidc_provider() -> Iterator[Provider]:
    """One provider per test process, for every test that asks (the browser's stack too)."""
    with running_provider() as provider:
        yield provider
