"""The dialogs of the task and DAG pages (trigger with parameters, backfill), rendered with
the page so they open without a request; each is also a page of its own (trigger_pages,
backfill_dialog), which the dialog's button links to when JavaScript is off."""

from __future__ import annotations

from typing import Any

from django import template
from django.urls import reverse

from dashboard.backfill_dialog import backfill_form
from dashboard.run_parameters import parameters_form
from dashboard.trigger_pages import dag_declared_parameters

register = template.Library()


@register.inclusion_tag("dashboard/_trigger_dialog.html", takes_context=True)
def trigger_dialog(context, target, kind: str) -> dict[str, Any]:
    declared = target.parameters if kind == "task" else dag_declared_parameters(target)
    name = "task-trigger-parameters" if kind == "task" else "dag-trigger-parameters"
    return {
        "csrf_token": context.get("csrf_token"),
        "tenant": context.get("tenant"),
        "target": target,
        "kind": kind,
        "form": parameters_form(declared),
        "action": reverse(f"dashboard:{name}", args=[target.id]),
    }


@register.inclusion_tag("dashboard/_backfill_dialog.html", takes_context=True)
def backfill_dialog(context, target, kind: str) -> dict[str, Any]:
    name = "task-backfill-new" if kind == "task" else "dag-backfill-new"
    return {
        "csrf_token": context.get("csrf_token"),
        "tenant": context.get("tenant"),
        "target": target,
        "kind": kind,
        "form": backfill_form(target),
        "action": reverse(f"dashboard:{name}", args=[target.id]),
    }
