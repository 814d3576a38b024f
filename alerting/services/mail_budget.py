"""What a tenant's notifications may mail: the platform's mail server is not a relay.

A channel with 40 external addresses mailed 40, and any `email://anyone@...` target was
taken. Now (settings.ALERTS):
- an email channel, and a task's `email://` targets together, name at most
  EMAIL_MAX_RECIPIENTS addresses (400 naming the field past it, `alerting.services.channels`
  and `alerting.services.targets`);
- with EMAIL_ALLOWED_DOMAINS set (the operator's), only addresses in those domains (or
  their subdomains) are taken when saved, and mailed when sent;
- a tenant's notifications mail at most EMAIL_PER_TENANT_PER_HOUR messages per rolling hour,
  one per recipient (`rolling_budgets`, in PostgreSQL). A notice over it is not sent: it is
  dropped, never silently: an audit entry of the tenant says what was dropped and why (GET
  /api/v1/audit, action `notification.dropped`), the worker logs it, and
  scheduler_notifications_dropped_total counts it. A channel test over it answers 429.

The platform's own alerts (ALERTS_OPS_EMAILS) are the operator's: neither capped nor counted.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction

from alerting.services.delivery import Target
from scheduler_app.errors import OverBudget
from scheduler_app.models import Tenant
from scheduler_app.monitoring.counters import record_notification_dropped
from scheduler_app.services.audit import audit_record
from scheduler_app.services.rolling_budgets import Budget, BudgetSpent, budget_charge, window_words

logger = logging.getLogger(__name__)

BUDGET = "mail_messages"


class MailRateExceeded(OverBudget):
    code = "mail_rate_exceeded"


def mail_budget() -> Budget:
    return Budget(
        name=BUDGET,
        limit=int(settings.ALERTS["EMAIL_PER_TENANT_PER_HOUR"]),
        window=timedelta(hours=1),
    )


def email_domain_allowed(address: str) -> bool:
    """Whether the operator's EMAIL_ALLOWED_DOMAINS (empty: any) take `address`."""
    allowed = [
        entry.strip().lower().lstrip("@").rstrip(".")
        for entry in settings.ALERTS["EMAIL_ALLOWED_DOMAINS"]
    ]
    if not allowed:
        return True
    domain = address.rsplit("@", 1)[-1].strip().lower().rstrip(".")
    return any(domain == entry or domain.endswith("." + entry) for entry in allowed)


def mail_recipients(target: Target) -> list[str]:
    return list(dict.fromkeys(a.strip() for a in target.target.split(",") if a.strip()))


def mail_recipients_admit(
    *, target: Target, message: dict[str, Any], now: datetime | None = None
) -> list[str]:
    """The recipients `message` may be mailed to now; the others are dropped, with a record
    (audit entry, log line, metric) saying which and why. Charges what it admits."""
    recipients = mail_recipients(target)
    if target.platform or target.tenant_id is None:
        # The operators' own alerts; a target of no tenant is a message from before targets
        # said whose they were (only the operators' had none): sent as it was.
        return recipients
    outside = [address for address in recipients if not email_domain_allowed(address)]
    if outside:
        _dropped(target, message, outside, reason="domain_not_allowed")
    admitted = [address for address in recipients if address not in outside]
    if not admitted:
        return []
    try:
        with transaction.atomic():
            budget_charge(
                tenant_id=target.tenant_id, budget=mail_budget(), amount=len(admitted), now=now
            )
    except BudgetSpent as spent:  # rolled back: what was not sent is not counted
        _dropped(target, message, admitted, reason="mail_rate", retry_after=spent.retry_after)
        return []
    return admitted


def mail_test_admit(*, target: Target, now: datetime | None = None) -> list[str]:
    """A channel test's recipients, charged as notices are; over the rate: 429."""
    recipients = [address for address in mail_recipients(target) if email_domain_allowed(address)]
    budget = mail_budget()
    try:
        with transaction.atomic():
            budget_charge(
                tenant_id=target.tenant_id, budget=budget, amount=len(recipients), now=now
            )
    except BudgetSpent as spent:
        raise MailRateExceeded(
            f"this tenant's notifications mailed {spent.used - len(recipients)} messages in "
            f"the last {window_words(budget.window)}; {len(recipients)} more would pass its "
            f"limit of {budget.limit}",
            retry_after=spent.retry_after,
        ) from spent
    return recipients


def _dropped(
    target: Target,
    message: dict[str, Any],
    addresses: list[str],
    *,
    reason: str,
    retry_after: float | None = None,
) -> None:
    words = {
        "mail_rate": f"over the tenant's {settings.ALERTS['EMAIL_PER_TENANT_PER_HOUR']} mails "
        "per hour",
        "domain_not_allowed": "outside the domains the platform mails "
        "(NOTIFY_EMAIL_ALLOWED_DOMAINS)",
    }[reason]
    logger.warning(
        "tenant %s: notification %r not mailed to %d recipients: %s",
        target.tenant_id,
        message.get("title"),
        len(addresses),
        words,
    )
    record_notification_dropped(
        tenant_id=str(target.tenant_id), kind="email", reason=reason, count=len(addresses)
    )
    tenant = Tenant.objects.filter(id=target.tenant_id).first()
    audit_record(
        tenant=tenant,
        actor="system",
        action="notification.dropped",
        object_type="execution" if message.get("execution_id") else "alert",
        object_id=str(message.get("execution_id") or message.get("incident_id") or ""),
        detail={
            "kind": "email",
            "reason": reason,
            "why": words,
            "recipients": len(addresses),
            "title": str(message.get("title", ""))[:200],
            "event": message.get("event"),
            "retry_after_seconds": round(retry_after) if retry_after else None,
        },
    )
