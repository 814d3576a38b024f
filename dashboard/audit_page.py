"""The audit log page: who did what to which object, newest first, filtered by actor, verb
and object, for whom the API's rule for GET /api/v1/audit allows (its `read_role`). The
tenant's own entries only, as the API's selector gives them."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from api.views_access import AuditListView
from dashboard.roles import ApiRule, follows_api
from dashboard.tenancy import dashboard_membership, remember_tenant
from dashboard.views import page_context
from scheduler_app import selectors
from scheduler_app.audit_verbs import KNOWN_VERBS, NOUNS, verb_of, verb_words
from scheduler_app.models import AuditEntry

PER_PAGE = 50
FILTERS = ("actor", "verb", "object_type", "object_id")
READ = ApiRule(AuditListView, "GET")
OBJECT_TYPES = (
    "task",
    "execution",
    "dag",
    "dag_run",
    "backfill",
    "channel",
    "invitation",
    "member",
    "incident",
)
SHOWN_VALUE = 120  # characters of one before/after value on the page


def object_link(entry: AuditEntry) -> str | None:
    """The dashboard page of the entry's object, when it has one."""
    object_id = entry.object_id
    if not object_id:
        return None
    kind = entry.object_type
    if kind == "task":
        return reverse("dashboard:task", args=[object_id])
    if kind in ("execution", "dlq"):
        return reverse("dashboard:execution", args=[object_id])
    if kind == "dag":
        return reverse("dashboard:dag", args=[object_id])
    dag_id = (entry.detail or {}).get("dag")
    if kind == "dag_run" and dag_id:
        return reverse("dashboard:dag-run", args=[dag_id, object_id])
    pages = {
        "backfill": "backfills",
        "channel": "channels",
        "invitation": "members",
        "member": "members",
        "incident": "incidents",
    }
    return reverse(f"dashboard:{pages[kind]}") if kind in pages else None


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= SHOWN_VALUE else text[: SHOWN_VALUE - 1] + "…"


def change_lines(entry: AuditEntry) -> list[str]:
    """'paused: false → true' for each field an entry says changed; a create lists what it
    set."""
    detail = entry.detail or {}
    before, after = detail.get("before") or {}, detail.get("after") or {}
    lines = []
    for key in [*before, *(key for key in after if key not in before)]:
        if key in before and key in after:
            lines.append(f"{key}: {_shown(before[key])} → {_shown(after[key])}")
        elif key in after:
            lines.append(f"{key}: {_shown(after[key])}")
        else:
            lines.append(f"{key}: was {_shown(before[key])}")
    return lines


def _row(entry: AuditEntry) -> dict[str, Any]:
    detail = entry.detail or {}
    verb = verb_of(entry.action)
    return {
        "entry": entry,
        "verb": verb,
        "words": verb_words(verb, entry.object_type),
        "noun": NOUNS.get(entry.object_type, entry.object_type.replace("_", " ")),
        "link": object_link(entry),
        "changes": change_lines(entry),
        "reason": detail.get("reason") or detail.get("note") or detail.get("comment") or "",
        "via": detail.get("via", ""),
    }


@login_required
@follows_api(GET=READ, HEAD=READ)
def audit_log(request: HttpRequest) -> HttpResponse:
    tenant = dashboard_membership(request).tenant
    chosen = {name: request.GET.get(name, "").strip()[:255] for name in FILTERS}
    entries = selectors.audit_list(tenant=tenant, filters=chosen)
    page = Paginator(entries, PER_PAGE).get_page(request.GET.get("page"))
    context = page_context(request)
    context.update(
        {
            "rows": [_row(entry) for entry in page.object_list],
            "page": page,
            "chosen": chosen,
            # The filters, kept by the pages' links.
            "kept": urlencode({name: value for name, value in chosen.items() if value}),
            "object_types": [(kind, NOUNS[kind]) for kind in OBJECT_TYPES],
            "verbs": [(verb, verb_words(verb)) for verb in KNOWN_VERBS],
        }
    )
    return remember_tenant(request, render(request, "dashboard/audit.html", context))
