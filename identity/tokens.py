"""The provider's discovery document and keys, and the one check of a token it signed.

Both the dashboard's login (the ID token of the code flow) and the API (a bearer access
token) go through `provider_token_verify`: signature by a key of the provider's JWKS, an
asymmetric algorithm from OIDC_SIGN_ALGORITHMS (never `none`, never HS256: with HS256 the
public key would be the secret), `iss` equal to OIDC_ISSUER, `aud` one of the accepted
audiences, `exp` in the future (`nbf`/`iat` honoured), within OIDC_CLOCK_SKEW_SECONDS.

The discovery document and the keys are fetched once per process and kept; a token naming
a key id that the kept keys lack fetches the keys again (the provider rotated), but at most
once per OIDC_JWKS_MIN_REFRESH_SECONDS, so made-up key ids cost the provider nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import jwt
import requests
from django.conf import settings


class ProviderTokenInvalid(Exception):
    """The token is not one the provider signed for us, now; the message says why."""


class ProviderUnavailable(Exception):
    """The provider's discovery document or keys could not be read."""


def _get_json(url: str) -> dict[str, Any]:
    try:
        response = requests.get(url, timeout=settings.OIDC_TIMEOUT)
        response.raise_for_status()
        document = response.json()
    except (requests.RequestException, ValueError) as error:
        raise ProviderUnavailable(f"{url}: {error}") from error
    if not isinstance(document, dict):
        raise ProviderUnavailable(f"{url}: not a JSON object")
    return document


@dataclass
class _Cached:
    value: dict[str, Any] | None = None
    fetched_at: float = float("-inf")


@dataclass
class ProviderKeys:
    """One process's view of the provider: its discovery document and its JWKS."""

    clock: Callable[[], float] = time.monotonic
    _discovery: _Cached = field(default_factory=_Cached)
    _jwks: _Cached = field(default_factory=_Cached)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def discovery(self) -> dict[str, Any]:
        with self._lock:
            if self._fresh(self._discovery):
                return self._discovery.value or {}
            document = _get_json(settings.OIDC_DISCOVERY_URL)
            # OpenID Connect Discovery 1.0 section 4.3: the document must name the issuer
            # it was asked for, or a different provider could stand in for ours.
            if document.get("issuer") != settings.OIDC_ISSUER:
                raise ProviderUnavailable(
                    f"the discovery document names issuer {document.get('issuer')!r}, "
                    f"not OIDC_ISSUER {settings.OIDC_ISSUER!r}"
                )
            self._discovery = _Cached(document, self.clock())
            return document

    def endpoint(self, name: str) -> str:
        url = self.discovery().get(name)
        if not isinstance(url, str) or not url:
            raise ProviderUnavailable(f"the discovery document has no {name}")
        return url

    def signing_key(self, *, kid: str | None, algorithm: str) -> jwt.PyJWK:
        key = self._find(kid, algorithm)
        if key is None and self._may_refresh():
            self._refresh_keys()
            key = self._find(kid, algorithm)
        if key is None:
            raise ProviderTokenInvalid(f"no key {kid!r} for {algorithm} in the provider's JWKS")
        return key

    def forget(self) -> None:
        with self._lock:
            self._discovery = _Cached()
            self._jwks = _Cached()

    # --- the keys --------------------------------------------------------------------
    def _fresh(self, cached: _Cached) -> bool:
        return (
            cached.value is not None
            and self.clock() - cached.fetched_at < settings.OIDC_JWKS_CACHE_SECONDS
        )

    def _may_refresh(self) -> bool:
        return self.clock() - self._jwks.fetched_at >= settings.OIDC_JWKS_MIN_REFRESH_SECONDS

    def _refresh_keys(self) -> None:
        document = _get_json(self.endpoint("jwks_uri"))
        with self._lock:
            self._jwks = _Cached(document, self.clock())

    def _find(self, kid: str | None, algorithm: str) -> jwt.PyJWK | None:
        if not self._fresh(self._jwks):
            self._refresh_keys()
        keys = [key for key in (self._jwks.value or {}).get("keys", []) if isinstance(key, dict)]
        candidates = [
            key
            for key in keys
            if (kid is None or key.get("kid") == kid)
            and key.get("use", "sig") == "sig"
            and key.get("alg", algorithm) == algorithm
        ]
        # A token without a key id is taken only when the set leaves no choice.
        if kid is None and len(candidates) != 1:
            return None
        for candidate in candidates:
            try:
                return jwt.PyJWK(candidate, algorithm=algorithm)
            except jwt.PyJWTError:
                continue
        return None


PROVIDER = ProviderKeys()


def token_issuer_unverified(token: str) -> str | None:
    """The `iss` a JWT claims, unchecked: only to route it to the check that can judge it."""
    try:
        issuer = jwt.decode(token, options={"verify_signature": False}).get("iss")
    except jwt.PyJWTError:
        return None
    return issuer if isinstance(issuer, str) else None


def provider_token_verify(
    token: str, *, audiences: Iterable[str], provider: ProviderKeys = PROVIDER
) -> dict[str, Any]:
    """The claims of `token`, or ProviderTokenInvalid saying what failed."""
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as error:
        raise ProviderTokenInvalid(f"not a JWT: {error}") from error
    algorithm = header.get("alg")
    if algorithm not in settings.OIDC_SIGN_ALGORITHMS:
        raise ProviderTokenInvalid(f"algorithm {algorithm!r} is not accepted")
    audiences = list(audiences)
    if not audiences:
        raise ProviderTokenInvalid("no audience is accepted (OIDC_API_AUDIENCES)")
    kid = header.get("kid")
    key = provider.signing_key(kid=kid if isinstance(kid, str) else None, algorithm=algorithm)
    try:
        claims = jwt.decode(
            token,
            key=key,
            algorithms=[algorithm],
            audience=audiences,
            issuer=settings.OIDC_ISSUER,
            leeway=settings.OIDC_CLOCK_SKEW_SECONDS,
            options={"require": ["exp", "iss", "aud", "sub"]},
        )
    except jwt.PyJWTError as error:
        raise ProviderTokenInvalid(str(error)) from error
    return claims
