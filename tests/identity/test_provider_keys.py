"""The provider's keys are kept, fetched again when a token names a key id they lack (the
provider rotated), and no more often than OIDC_JWKS_MIN_REFRESH_SECONDS however many made-up
key ids arrive: a real HTTP server publishes the discovery document and the JWKS and counts
the fetches; the test moves the keys' clock instead of sleeping."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
import pytest
from django.test import override_settings
from jwcrypto import jwk

from identity.tokens import (
    ProviderKeys,
    ProviderTokenInvalid,
    ProviderUnavailable,
    provider_token_verify,
)
from tests.oidc_provider import private_key_pem


class KeyServer:
    def __init__(self) -> None:
        self.keys: list[dict] = []
        self.fetches = {"discovery": 0, "jwks": 0}
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.endswith("openid-configuration"):
                    owner.fetches["discovery"] += 1
                    body = {"issuer": owner.issuer, "jwks_uri": f"{owner.issuer}/jwks"}
                else:
                    owner.fetches["jwks"] += 1
                    body = {"keys": owner.keys}
                payload = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.issuer = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def publish(self, *pems: str) -> None:
        self.keys = [
            {**json.loads(jwk.JWK.from_pem(pem.encode()).export_public()), "kid": _kid(pem)}
            for pem in pems
        ]

    def token(self, pem: str, *, kid: str | None = None) -> str:
        now = int(time.time())
        claims = {"iss": self.issuer, "sub": "7", "aud": "scheduler", "iat": now, "exp": now + 60}
        return jwt.encode(claims, pem, algorithm="RS256", headers={"kid": kid or _kid(pem)})


def _kid(pem: str) -> str:
    return jwk.JWK.from_pem(pem.encode()).thumbprint()


class Seconds:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def key_server():
    server = KeyServer()
    with override_settings(
        OIDC_ISSUER=server.issuer,
        OIDC_DISCOVERY_URL=f"{server.issuer}/.well-known/openid-configuration",
        OIDC_JWKS_CACHE_SECONDS=3600.0,
        OIDC_JWKS_MIN_REFRESH_SECONDS=10.0,
    ):
        yield server
    server.server.shutdown()


def test_keys_are_kept_and_fetched_again_for_a_new_kid_at_most_every_ten_seconds(key_server):
    old, new = private_key_pem(), private_key_pem()
    clock = Seconds()
    keys = ProviderKeys(clock=clock)
    key_server.publish(old)

    def verify(token: str) -> dict:
        return provider_token_verify(token, audiences=["scheduler"], provider=keys)

    assert verify(key_server.token(old))["sub"] == "7"
    assert verify(key_server.token(old))["sub"] == "7"
    assert key_server.fetches == {"discovery": 1, "jwks": 1}  # kept
    # The provider rotates: a token under the new key fetches the keys again, once.
    key_server.publish(old, new)
    clock.now += 11
    assert verify(key_server.token(new))["sub"] == "7"
    assert key_server.fetches["jwks"] == 2
    # Made-up key ids: refused, and within ten seconds of the last fetch they fetch nothing.
    for kid in ("made-up-1", "made-up-2", "made-up-3"):
        with pytest.raises(ProviderTokenInvalid, match="no key"):
            verify(key_server.token(new, kid=kid))
    assert key_server.fetches["jwks"] == 2
    clock.now += 11
    with pytest.raises(ProviderTokenInvalid):
        verify(key_server.token(new, kid="made-up-4"))
    assert key_server.fetches["jwks"] == 3
    # Past the cache's life, the next token fetches them afresh.
    clock.now += 3601
    assert verify(key_server.token(old))["sub"] == "7"
    assert key_server.fetches["jwks"] == 4


def test_a_discovery_document_naming_another_issuer_is_refused(key_server):
    key_server.publish(private_key_pem())
    impostor = override_settings(OIDC_ISSUER=f"{key_server.issuer}/impostor")
    with impostor, pytest.raises(ProviderUnavailable, match="names issuer"):
        ProviderKeys().endpoint("jwks_uri")
