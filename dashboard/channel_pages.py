"""The dashboard's notification channels: list them (how a task names each), add one, send a
test message, delete one. Allowed by the API's rules for the channel endpoints (tenant
admins); secrets are never shown."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from alerting import selectors as alerting_selectors
from alerting.models import ChannelKind
from alerting.services import channels
from alerting.services.channels import KIND_FIELDS
from api import views_channels as api
from api.serializers_channels import ChannelOutput
from dashboard.actions import posted_note
from dashboard.roles import ApiRule, follows_api
from dashboard.tenancy import dashboard_membership
from dashboard.views import page_context
from scheduler_app.errors import DomainError, NotFound

FORM_FIELDS = ("url", "signing_secret", "webhook_url", "bot_token", "addresses", "routing_key")
# The add form's kind-specific inputs: label and input type; the kinds come from KIND_FIELDS.
INPUTS = {
    "url": ("Webhook URL", "url"),
    "signing_secret": ("Signing secret", "password"),
    "webhook_url": ("Incoming-webhook URL", "password"),
    "bot_token": ("Bot token", "password"),
    "addresses": ("Addresses, comma separated", "text"),
    "routing_key": ("Routing key", "password"),
}


def kind_inputs() -> list[dict[str, object]]:
    """Each kind-specific input with the kinds that use it (the page shows only the chosen
    kind's; the POST keeps only the chosen kind's)."""
    return [
        {
            "name": name,
            "label": INPUTS[name][0],
            "type": INPUTS[name][1],
            "kinds": [kind for kind, keys in KIND_FIELDS.items() if name in keys],
        }
        for name in FORM_FIELDS
    ]


@login_required
@follows_api(
    GET=ApiRule(api.ChannelListView, "GET"),
    HEAD=ApiRule(api.ChannelListView, "GET"),
    POST=ApiRule(api.ChannelListView, "POST"),
)
def channel_list(request: HttpRequest) -> HttpResponse:
    membership = dashboard_membership(request)
    if request.method == "POST":
        values = {key: request.POST.get(key, "").strip() for key in FORM_FIELDS}
        kind = request.POST.get("kind", "")
        try:
            channels.channel_create(
                tenant=membership.tenant,
                name=request.POST.get("name", "").strip(),
                kind=kind,
                alerts=request.POST.get("alerts") == "on",
                # Only the selected kind's fields: the form shows every kind's inputs.
                **{key: value for key, value in values.items() if key in KIND_FIELDS.get(kind, ())},
            )
        except DomainError as error:
            messages.error(request, f"{error.field or 'channel'}: {error.message}")
        else:
            messages.success(request, "Channel added")
            return redirect("dashboard:channels")
    context = page_context(request)
    context.update(
        {
            "channels": ChannelOutput(
                alerting_selectors.channel_list(tenant=membership.tenant), many=True
            ).data,
            "kinds": ChannelKind.values,
            "kind_fields": KIND_FIELDS,
            "kind_inputs": kind_inputs(),
            "chosen_kind": request.POST.get("kind", "") if request.method == "POST" else "",
        }
    )
    return render(request, "dashboard/channels.html", context)


@login_required
@follows_api(
    actions={
        "test": ApiRule(api.ChannelTestView, "POST"),
        "delete": ApiRule(api.ChannelDetailView, "DELETE"),
    }
)
def channel_action(request: HttpRequest, channel_id: str, action: str) -> HttpResponse:
    membership = dashboard_membership(request)
    try:
        channel = alerting_selectors.channel_get(tenant=membership.tenant, channel_id=channel_id)
    except NotFound as error:
        raise Http404(str(error)) from error
    if action == "test":
        result = channels.channel_test(
            channel=channel, route=request.POST.get("slack_channel", "").strip()
        )
        report = messages.success if result.ok else messages.error
        report(
            request, f"Test to {channel.name}: {'ok' if result.ok else 'failed'}: {result.detail}"
        )
    elif action == "delete":
        channels.channel_delete(channel=channel, note=posted_note(request))
        messages.success(request, f"Deleted {channel.name}")
    else:
        raise Http404("unknown action")
    return redirect("dashboard:channels")
