"""Domain errors. The API's one exception handler maps them to 4xx with a stable `code`."""

from __future__ import annotations

from collections.abc import Sequence


class DomainError(Exception):
    status_code = 400
    code = "invalid"

    def __init__(
        self, message: str, *, field: str | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        # Seconds after which the same request may succeed (a budget refilling): the API
        # answers it as Retry-After.
        self.retry_after = retry_after


class ValidationFailed(DomainError):
    code = "invalid"


class ValidationErrors(ValidationFailed):
    """Several refusals of one block of a request at once (every mistake of a schedule), so
    a client fixes them in one round trip. `field` and `message` are the first's (what a
    caller that knows only ValidationFailed reads); `errors` holds each, in order."""

    def __init__(self, errors: Sequence[ValidationFailed]) -> None:
        if not errors:
            raise ValueError("ValidationErrors needs at least one error")
        super().__init__(errors[0].message, field=errors[0].field)
        self.errors = list(errors)


def validation_errors_raise(errors: Sequence[ValidationFailed]) -> None:
    """Raise nothing, the one error, or all of them as ValidationErrors."""
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise ValidationErrors(errors)


def each_validation_error(error: ValidationFailed) -> list[ValidationFailed]:
    """The single refusals `error` stands for (itself, or every one of a ValidationErrors)."""
    return list(error.errors) if isinstance(error, ValidationErrors) else [error]


class NotFound(DomainError):
    status_code = 404
    code = "not_found"


class Forbidden(DomainError):
    """The caller is who they say, and may not do this (approve their own run): 403, and
    nothing of the object beyond what the caller could already see."""

    status_code = 403
    code = "forbidden"


class Conflict(DomainError):
    status_code = 409
    code = "conflict"


class TooLarge(DomainError):
    """A document or a definition past its size cap (DEFINITION_MAX_*_BYTES)."""

    status_code = 413
    code = "too_large"


class LimitReached(Conflict):
    """A per-tenant limit on things running at once (BACKFILL_MAX_RUNNING_PER_TENANT)."""

    code = "limit_reached"


class Gone(DomainError):
    """It existed, and can no longer be used (a used, expired or revoked invitation)."""

    status_code = 410
    code = "gone"


class DeliveryFailed(DomainError):
    """A message the request depends on (an invitation's email) could not be handed over."""

    status_code = 502
    code = "delivery_failed"


class PayloadTooLarge(TooLarge):
    """A value over its size cap (an event payload, trigger parameters): 413."""

    code = "payload_too_large"


class OverBudget(DomainError):
    """A tenant's budget is spent for now (searches at once, bytes per hour, mails per
    hour): 429 with Retry-After."""

    status_code = 429
    code = "over_budget"
