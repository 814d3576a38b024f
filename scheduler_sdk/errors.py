"""Errors as exceptions that carry what the API said: its `code`, `field` and `message`.

The server's one exception handler answers every 4xx as JSON
`{"code", "message", "field", "errors"}`; `ApiError.from_response` reads that shape, and
falls back to the HTTP status for answers that are not the API's own (a proxy's 502, an
HTML 404 for a path the server does not route).
"""

from __future__ import annotations

from typing import Any


class SchedulerError(Exception):
    """Anything the SDK raises on purpose."""


class NotLoggedIn(SchedulerError):
    """No credentials: neither a stored login nor SCHEDCTL_API_KEY."""


class ApiError(SchedulerError):
    """A non-2xx answer. `code` and `field` are the API's (None when the answer was not the
    API's JSON); `errors` maps dotted field paths to messages."""

    def __init__(
        self,
        message: str,
        *,
        status: int,
        code: str | None = None,
        field: str | None = None,
        errors: dict[str, list[str]] | None = None,
        method: str = "",
        path: str = "",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.field = field
        self.errors = errors or {}
        self.method = method
        self.path = path

    def __str__(self) -> str:
        where = f" (field {self.field})" if self.field and self.field not in self.message else ""
        return f"{self.message}{where}"

    @classmethod
    def from_response(cls, response: Any) -> ApiError:
        body: Any = None
        try:
            body = response.json()
        except ValueError:
            body = None
        request = getattr(response, "request", None)
        method = getattr(request, "method", "") or ""
        path = getattr(request, "path_url", "") or ""
        kind = _KINDS.get(response.status_code, ApiError)
        if isinstance(body, dict) and "message" in body:
            return kind(
                str(body["message"]),
                status=response.status_code,
                code=body.get("code"),
                field=body.get("field"),
                errors=body.get("errors"),
                method=method,
                path=path,
            )
        if isinstance(body, dict) and "detail" in body:  # a framework answer without our handler
            return kind(
                str(body["detail"]),
                status=response.status_code,
                code=body.get("code"),
                method=method,
                path=path,
            )
        reason = getattr(response, "reason", "") or "error"
        return kind(
            f"{method} {path} answered {response.status_code} {reason}".strip(),
            status=response.status_code,
            method=method,
            path=path,
        )


class Unauthorized(ApiError):
    """401: the credentials are missing, wrong or expired beyond refreshing."""


class Forbidden(ApiError):
    """403: the role does not allow it (or the route is for platform staff)."""


class NotFound(ApiError):
    """404: no such object in this tenant, or no such route on this server."""


class Conflict(ApiError):
    """409: the object's state does not allow it (already retried, already ended, name taken)."""


class RateLimited(ApiError):
    """429: over the tenant's rate limit or the login throttle."""


_KINDS: dict[int, type[ApiError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    429: RateLimited,
}


class EndpointMissing(SchedulerError):
    """The server does not offer an endpoint this client knows (an older server)."""


class DefinitionError(SchedulerError):
    """A definition file or object the client cannot read (before anything is sent)."""

    def __init__(self, message: str, *, source: str = "") -> None:
        super().__init__(f"{source}: {message}" if source else message)
        self.source = source
