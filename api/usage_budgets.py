"""The `budgets` of GET /api/v1/tenant/usage: what the tenant may spend of what it supplies,
and has spent, so a client sees a refusal coming. Composed here, where the core's budgets
(payloads, log searches) and alerting's (mail) may both be read."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from alerting.services.mail_budget import mail_budget
from scheduler_app.models import Tenant
from scheduler_app.services.payload_quota import payload_budget
from scheduler_app.services.rolling_budgets import budget_spent


def usage_budgets(*, tenant: Tenant) -> dict[str, Any]:
    payloads, mails = payload_budget(), mail_budget()
    return {
        "payload_bytes": {
            "used": budget_spent(tenant_id=tenant.id, budget=payloads),
            "limit": payloads.limit,
            "window_seconds": int(payloads.window.total_seconds()),
            "max_bytes_each": int(settings.PAYLOADS["MAX_BYTES"]),
        },
        "mail_messages": {
            "used": budget_spent(tenant_id=tenant.id, budget=mails),
            "limit": mails.limit,
            "window_seconds": int(mails.window.total_seconds()),
            "max_recipients": int(settings.ALERTS["EMAIL_MAX_RECIPIENTS"]),
        },
        "log_searches": {
            "at_once": int(settings.LOG_SEARCH["MAX_CONCURRENT_PER_TENANT"]),
            "timeout_seconds": float(settings.LOG_SEARCH["TIMEOUT_SECONDS"]),
        },
        "webhook_allowed_hosts": list(tenant.webhook_allowed_hosts),
    }
