"""Alerting's system checks (registered in AlertingConfig.ready).

- scheduler.W140  production settings without MANUAL_BASE_URL: every alert's runbook link
                  points at a file on the server's disk (the local build), which nobody
                  paged can open.
- scheduler.W141  MANUAL_BASE_URL is not an http(s) URL.
- scheduler.E142  ALERTS_AUTOSCALING is not one of kubernetes, keda, none, auto.
"""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Error, Warning, register

from alerting.autoscaling import AUTOSCALING_MODES


@register(deploy=False)
def check_manual_base_url(app_configs=None, **kwargs) -> list:
    configured = (getattr(settings, "MANUAL_BASE_URL", "") or "").strip()
    if configured and not configured.startswith(("http://", "https://")):
        return [
            Warning(
                f"MANUAL_BASE_URL {configured!r} is not an http(s) URL",
                hint="Set it to where the built manual (`make docs`, build/manual) is served.",
                id="scheduler.W141",
            )
        ]
    if not configured and getattr(settings, "SCHEDULER_PRODUCTION", False):
        return [
            Warning(
                "MANUAL_BASE_URL is not set: alerts link their runbooks to the local build of "
                "the manual, a file on this server",
                hint="Serve the built manual (`make docs`, build/manual) and set "
                "MANUAL_BASE_URL to its address (and Prometheus' external label).",
                id="scheduler.W140",
            )
        ]
    return []


@register(deploy=False)
def check_autoscaling_mode(app_configs=None, **kwargs) -> list:
    mode = str(settings.ALERTS.get("AUTOSCALING", "auto")).strip().lower()
    if mode not in AUTOSCALING_MODES:
        return [
            Error(
                f"ALERTS_AUTOSCALING={mode!r} is not one of {', '.join(AUTOSCALING_MODES)}",
                id="scheduler.E142",
            )
        ]
    return []
