"""What each alert rule means, in the words an operator reads on a page: the title of its
incidents and one sentence of what fired. Pure (no Django): the dashboard, the API and
schedctl show the same words. tests/alerting/test_incidents.py checks every rule of
alerting/rules.py and the task's own `task_failing` has its words here."""

from __future__ import annotations

RULE_WORDS: dict[str, tuple[str, str]] = {
    "error_rate_high": (
        "Error rate high",
        "More of this tenant's runs in the last hour failed than the error-rate threshold allows.",
    ),
    "success_rate_low": (
        "Success rate low",
        "Too few of this tenant's runs in the last hour succeeded (cancelled, skipped and"
        " timed-out runs count against it).",
    ),
    "missed_schedule": (
        "Missed schedule",
        "A task's fires started late or not at all: the scheduler is not keeping up with it.",
    ),
    "task_failing": (
        "Task failing",
        "A task's runs are failing; the incident resolves at its next success.",
    ),
    "sla_missed": (
        "SLA missed",
        "A run has not finished within the SLA its task or DAG promises.",
    ),
    "quota_breached": (
        "Quota reached",
        "This tenant reached one of its quotas: more of what it counts is refused.",
    ),
    "queue_depth_high": ("Queue depth high", "A queue holds more messages than its threshold."),
    "dead_worker": ("Worker dead", "A worker stopped heartbeating or renewing its leases."),
    "worker_pool_saturated": (
        "Worker pool saturated",
        "Runs wait for a free worker process in a tier.",
    ),
    "leader_failover": ("Leader failover", "The scheduler's leadership changed hands recently."),
}


def rule_title(rule: str) -> str:
    return RULE_WORDS.get(rule, (rule.replace("_", " ").capitalize(), ""))[0]


def rule_description(rule: str) -> str:
    return RULE_WORDS.get(rule, ("", ""))[1]
