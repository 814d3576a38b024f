"""The per-tenant webhook allow-list is the operator's (`scheduler_app.services.
tenant_network`): set by `manage.py tenant_webhook_hosts` or the admin, audited, never by the
tenant; the retired platform-wide variable stops `manage.py`; each delivery is judged by
its owner's list."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.urls import reverse

from alerting.selectors import delivery_allowed_hosts
from alerting.services.delivery import Target
from project.checks import check_retired_webhook_hosts
from scheduler_app.models import AuditEntry, Tenant
from site_admin.admin_tenants import TenantAdminForm
from tests.api_clients import member_client

pytestmark = pytest.mark.django_db


def _hosts(tenant) -> list[str]:
    return Tenant.objects.get(id=tenant.id).webhook_allowed_hosts


def test_the_operator_sets_a_tenants_hosts_with_the_command(tenant, capsys):
    call_command("tenant_webhook_hosts", tenant.slug, "--allow", "Intranet.Example.", "10.0.0.5")
    assert _hosts(tenant) == ["intranet.example", "10.0.0.5"]
    assert "internal hosts allowed: intranet.example, 10.0.0.5" in capsys.readouterr().out
    call_command("tenant_webhook_hosts", tenant.slug, "--remove", "intranet.example")
    assert _hosts(tenant) == ["10.0.0.5"]
    for bad in ("http://intranet.example", "*.example", "host:8080", "a b"):
        with pytest.raises(CommandError, match="not a host name or an IP address"):
            call_command("tenant_webhook_hosts", tenant.slug, "--allow", bad)
    assert _hosts(tenant) == ["10.0.0.5"]  # a refused change changed nothing
    call_command("tenant_webhook_hosts", tenant.slug, "--clear")
    assert _hosts(tenant) == []
    with pytest.raises(CommandError, match="no tenant"):
        call_command("tenant_webhook_hosts", "nobody", "--allow", "x.example")
    audited = AuditEntry.platform.filter(tenant=tenant, action="tenant.webhook-allowed-hosts")
    assert [entry.detail["after"] for entry in audited.order_by("id")] == [
        ["intranet.example", "10.0.0.5"],
        ["10.0.0.5"],
        [],
    ]
    assert {entry.actor for entry in audited} == {"operator:manage.py"}


def test_a_tenants_own_admin_has_no_way_to_change_it(tenant, client):
    admin_api, admin_user = member_client(tenant, "admin", username="acme-own-admin")
    # The tenant's API has no route that writes it ...
    for method in ("patch", "put", "post"):
        answer = getattr(admin_api, method)(
            "/api/v1/tenant/usage", {"webhook_allowed_hosts": ["10.0.0.5"]}, format="json"
        )
        assert answer.status_code == 405
    # It reads what the operator allowed it.
    call_command("tenant_webhook_hosts", tenant.slug, "--allow", "intranet.example")
    usage = admin_api.get("/api/v1/tenant/usage").json()
    assert usage["budgets"]["webhook_allowed_hosts"] == ["intranet.example"]
    call_command("tenant_webhook_hosts", tenant.slug, "--clear")
    # ... and the Django admin is the platform staff's only.
    client.force_login(admin_user)
    page = client.get(reverse("admin:scheduler_app_tenant_change", args=[tenant.id]))
    assert page.status_code == 302 and "/login/" in page["Location"]
    assert _hosts(tenant) == []


def test_the_admin_form_takes_hosts_as_the_command_does(tenant, client):
    form = TenantAdminForm(instance=tenant)
    data = {**form.initial, "webhook_allowed_hosts": "Intranet.Example., 10.0.0.5"}
    taken = TenantAdminForm(data=data, instance=tenant)
    assert taken.is_valid(), taken.errors
    assert taken.cleaned_data["webhook_allowed_hosts"] == ["intranet.example", "10.0.0.5"]
    refused = TenantAdminForm(
        data={**data, "webhook_allowed_hosts": "http://x.example"}, instance=tenant
    )
    assert not refused.is_valid() and "webhook_allowed_hosts" in refused.errors
    # Saved by platform staff: through the service, audited under the staff member's name.
    client.force_login(
        get_user_model().objects.create_superuser("root", "root@example.com", "pw-123456")
    )
    saved = client.post(
        reverse("admin:scheduler_app_tenant_change", args=[tenant.id]),
        {
            **{key: value for key, value in data.items() if key != "shell_egress_allowed"},
            "is_active": "on",
            "memberships-TOTAL_FORMS": "0",
            "memberships-INITIAL_FORMS": "0",
            "memberships-MIN_NUM_FORMS": "0",
            "memberships-MAX_NUM_FORMS": "1000",
        },
    )
    assert saved.status_code == 302, saved.content[:3000]
    assert _hosts(tenant) == ["intranet.example", "10.0.0.5"]
    [entry] = AuditEntry.platform.filter(tenant=tenant, action="tenant.webhook-allowed-hosts")
    assert entry.actor == "operator:root" and entry.detail["before"] == []


def test_the_retired_platform_wide_variable_stops_manage_py(settings):
    settings.RETIRED_WEBHOOK_ALLOWED_HOSTS = ["intranet.example"]
    [error] = check_retired_webhook_hosts()
    assert error.id == "scheduler.E007" and "intranet.example" in error.msg
    settings.RETIRED_WEBHOOK_ALLOWED_HOSTS = []
    assert check_retired_webhook_hosts() == []


def test_each_delivery_is_judged_by_its_owners_list(tenant, tenant_factory, settings):
    settings.ALERTS = {**settings.ALERTS, "WEBHOOK_ALLOWED_HOSTS": ["alerts.internal"]}
    call_command("tenant_webhook_hosts", tenant.slug, "--allow", "acme.internal")
    other, _ = tenant_factory("globex")
    platform = Target("webhook", "http://alerts.internal/", platform=True)
    acme = Target("webhook", "http://alerts.internal/", tenant_id=str(tenant.id))
    globex = Target("webhook", "http://alerts.internal/", tenant_id=str(other.id))
    assert delivery_allowed_hosts(platform) == ["alerts.internal"]
    assert delivery_allowed_hosts(acme) == ["acme.internal"]
    assert delivery_allowed_hosts(globex) == []
    assert delivery_allowed_hosts(Target("webhook", "http://alerts.internal/")) == []
