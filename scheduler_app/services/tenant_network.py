"""Which internal hosts a tenant may reach: the operator's per-tenant webhook allow-list.

The SSRF guard (`handler_contract.ssrf`) refuses any request to a host that resolves to a
private, loopback, link-local or metadata address unless the host is allow-listed. A
platform-wide list let every tenant reach a host the operator had allowed for one purpose
(the platform's own alert receiver, one tenant's intranet service). Now a tenant's http
tasks, notification webhooks and channel tests are judged against the tenant's own list
(`Tenant.webhook_allowed_hosts`), and the platform's alerts against
NOTIFY_WEBHOOK_ALLOWED_HOSTS, which no tenant gets. The list is set here, by the operator
(the admin, `manage.py tenant_webhook_hosts`); no API or dashboard route of a tenant writes it.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

from scheduler_app.errors import ValidationFailed
from scheduler_app.models import Tenant
from scheduler_app.services.audit import audit_record

MAX_HOSTS = 100
_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_HOSTNAME = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*$")


def webhook_host_normalize(text: str) -> str:
    """A host as the guard compares it (lower case, no brackets or final dot), or
    ValidationFailed: an exact name or IP literal, never a pattern, a URL or a port."""
    host = str(text).strip().strip("[]").rstrip(".").lower()
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    if len(host) > 253 or not _HOSTNAME.match(host):
        raise ValidationFailed(
            f"{text!r} is not a host name or an IP address (no scheme, port, path or *)",
            field="webhook_allowed_hosts",
        )
    return host


def webhook_hosts_normalize(hosts: Iterable[str]) -> list[str]:
    normalized = list(dict.fromkeys(webhook_host_normalize(host) for host in hosts))
    if len(normalized) > MAX_HOSTS:
        raise ValidationFailed(
            f"at most {MAX_HOSTS} hosts per tenant", field="webhook_allowed_hosts"
        )
    return normalized


def tenant_webhook_hosts_set(*, tenant: Tenant, hosts: Iterable[str], actor: str) -> Tenant:
    """Replace the tenant's allow-list (the operator's decision), and audit it."""
    normalized = webhook_hosts_normalize(hosts)
    before = list(
        Tenant.objects.filter(id=tenant.id).values_list("webhook_allowed_hosts", flat=True).get()
    )
    Tenant.objects.filter(id=tenant.id).update(webhook_allowed_hosts=normalized)
    tenant.webhook_allowed_hosts = normalized
    audit_record(
        tenant=tenant,
        actor=actor,
        action="tenant.webhook-allowed-hosts",
        object_type="tenant",
        object_id=str(tenant.id),
        detail={"before": before, "after": normalized},
    )
    return tenant
