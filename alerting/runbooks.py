"""Every alert names its runbook: a section of the manual's docs/operations/runbooks.md.

The in-app rules (alerting/rules.py, and the `task_failing` incident of a task's own
failures) map here to the section's anchor; the Prometheus rules carry the same page as
their `runbook_url` annotation (deploy/prometheus/alerts.yml). tests/alerting/test_runbooks.py
checks that every rule of both has an entry and every anchor exists on the page, so a link
in a page never points at nothing.

The URL is MANUAL_BASE_URL (where the built manual is served) plus the page; unset, it is
the local build (`make docs` writes build/manual), which is enough on a developer's machine
and is why production warns (scheduler.W140) while it is unset.
"""

from __future__ import annotations

from django.conf import settings

RUNBOOKS_PAGE = "operations/runbooks.html"

# In-app rule -> anchor of its section. The twins of the Prometheus rules share its section.
RUNBOOK_ANCHORS: dict[str, str] = {
    "error_rate_high": "schedulererrorratehigh",
    "success_rate_low": "schedulersuccessratelow",
    "missed_schedule": "schedulermissedschedule",
    "queue_depth_high": "schedulerqueuedepthhigh",
    "dead_worker": "schedulerdeadworker",
    "worker_pool_saturated": "schedulerworkerpoolsaturated",
    "leader_failover": "schedulerleaderfailover",
    "sla_missed": "sla-missed",
    "quota_breached": "quota-breached",
    "task_failing": "task-failing-repeatedly",
}


def manual_base_url() -> str:
    """Where the built manual is, without a trailing slash."""
    configured = (getattr(settings, "MANUAL_BASE_URL", "") or "").strip()
    if configured:
        return configured.rstrip("/")
    return (settings.BASE_DIR / "build" / "manual").as_uri()


def runbook_url(rule: str) -> str:
    """The full URL of `rule`'s runbook section; the page's top for a rule without one."""
    anchor = RUNBOOK_ANCHORS.get(rule)
    page = f"{manual_base_url()}/{RUNBOOKS_PAGE}"
    return f"{page}#{anchor}" if anchor else page
