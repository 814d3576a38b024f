"""Single sign-on with an OpenID Connect provider (docs/operations/sso.md), read once here.

Off entirely unless OIDC_ISSUER is set: no button, no provider backend, the API's provider
token class answers nothing, password login as before. Everything the dashboard's login and
the API's token check need comes from the provider's discovery document (OIDC_ISSUER +
/.well-known/openid-configuration, or OIDC_DISCOVERY_URL), fetched when first needed.
"""

from __future__ import annotations

from identity.grants import group_roles_parse
from project.settings.env import env_bool, env_float, env_list, env_secret, env_str

OIDC_ISSUER = env_str("OIDC_ISSUER", "").strip()
OIDC_ENABLED = bool(OIDC_ISSUER)
OIDC_DISCOVERY_URL = env_str("OIDC_DISCOVERY_URL", "").strip() or (
    f"{OIDC_ISSUER.rstrip('/')}/.well-known/openid-configuration" if OIDC_ENABLED else ""
)
OIDC_RP_CLIENT_ID = env_str("OIDC_CLIENT_ID", "").strip()
OIDC_RP_CLIENT_SECRET = env_secret("OIDC_CLIENT_SECRET", "")
OIDC_RP_SCOPES = env_str("OIDC_SCOPES", "openid email profile")
# Where the token names the user's groups: a claim, or a dotted path into one
# (Keycloak's realm roles: "realm_access.roles").
OIDC_GROUPS_CLAIM = env_str("OIDC_GROUPS_CLAIM", "groups")
# "group=tenant:role,...": the provider's groups to this installation's tenants and roles,
# applied at every login; parsed here so that a typo stops the start, naming the entry.
OIDC_GROUP_ROLES = group_roles_parse(env_str("OIDC_GROUP_ROLES", ""))
# Off: password login (dashboard, admin, the API's token endpoint) is refused for everyone
# but superusers (break-glass); API keys are not passwords and keep working.
OIDC_LOCAL_LOGIN = env_bool("OIDC_LOCAL_LOGIN", True)
OIDC_PROVIDER_NAME = env_str("OIDC_PROVIDER_NAME", "") or "SSO"
# The `aud` the API accepts in a provider's access token (default: the client id).
OIDC_API_AUDIENCES = env_list(
    "OIDC_API_AUDIENCES", [OIDC_RP_CLIENT_ID] if OIDC_RP_CLIENT_ID else []
)
# Asymmetric signatures only: HS256 would make the public JWKS a signing key, and `none`
# no signature at all; both are refused whatever this says.
OIDC_SIGN_ALGORITHMS = [
    algorithm
    for algorithm in env_list("OIDC_SIGN_ALGORITHMS", ["RS256", "ES256"])
    if algorithm[:2] in ("RS", "ES", "PS")
]
# The provider's keys are kept this long; a token signed by a key not among them (the
# provider rotated) fetches them again, at most once per OIDC_JWKS_MIN_REFRESH_SECONDS, so
# tokens with made-up key ids cannot make every request a fetch.
OIDC_JWKS_CACHE_SECONDS = env_float("OIDC_JWKS_CACHE_SECONDS", 3600.0)
OIDC_JWKS_MIN_REFRESH_SECONDS = env_float("OIDC_JWKS_MIN_REFRESH_SECONDS", 10.0)
OIDC_CLOCK_SKEW_SECONDS = env_float("OIDC_CLOCK_SKEW_SECONDS", 30.0)
# Seconds a call to the provider (discovery, keys, token, userinfo) may take.
OIDC_TIMEOUT = env_float("OIDC_TIMEOUT_SECONDS", 5.0)

if OIDC_ENABLED and not OIDC_RP_CLIENT_ID:
    raise ValueError("OIDC_ISSUER is set but OIDC_CLIENT_ID is not")

# After the login throttle (project/settings/base.py): without single sign-on Django's own
# password backend; with it, passwords as OIDC_LOCAL_LOGIN says (identity/backends.py) and
# the provider's code flow (dashboard/sso.py).
# PASSWORD_LOGIN_BACKEND is also the backend a session opened by a password (an invitation
# accepted with a new account, dashboard/join.py) is bound to.
PASSWORD_LOGIN_BACKEND = (
    "identity.backends.LocalPasswordBackend"
    if OIDC_ENABLED
    else "django.contrib.auth.backends.ModelBackend"
)
OIDC_PASSWORD_AND_PROVIDER_BACKENDS = [PASSWORD_LOGIN_BACKEND] + (
    ["dashboard.sso.ProviderLoginBackend"] if OIDC_ENABLED else []
)

# mozilla-django-oidc's own settings (dashboard/sso.py subclasses its views and backend).
OIDC_AUTHENTICATION_CALLBACK_URL = "dashboard:sso-callback"
# Authorization code with PKCE (S256): the code is worthless to whoever intercepts it.
OIDC_USE_PKCE = True
OIDC_STORE_ID_TOKEN = False
LOGIN_REDIRECT_URL_FAILURE = "/dashboard/login/"
