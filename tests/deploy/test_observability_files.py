"""deploy/prometheus/alerts.yml and deploy/grafana/dashboard.json: well formed, the rules the
issue asks for, and every metric they use is one /metrics exposes (METRIC_NAMES is itself
checked against a real scrape in tests/monitoring/test_metrics.py)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from scheduler_app.monitoring.metrics import METRIC_NAMES

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
ALERTS_TEST = ROOT / "deploy" / "prometheus" / "alerts_test.yml"
GRAFANA = ROOT / "deploy" / "grafana" / "dashboard.json"
METRIC = re.compile(r"\bscheduler_[a-z_]+\b")
SERIES_SUFFIXES = ("_bucket", "_sum", "_count")


def metric_exists(name: str) -> bool:
    if name in METRIC_NAMES:
        return True
    return any(name.endswith(s) and name[: -len(s)] in METRIC_NAMES for s in SERIES_SUFFIXES)


def rules() -> dict[str, dict]:
    document = yaml.safe_load(ALERTS.read_text())
    return {rule["alert"]: rule for group in document["groups"] for rule in group["rules"]}


def test_the_required_alerts_exist_with_their_thresholds():
    by_name = rules()
    assert "overdue_schedules" in by_name["SchedulerMissedSchedule"]["expr"]
    assert "> 0.05" in by_name["SchedulerErrorRateHigh"]["expr"]
    assert "[1h]" in by_name["SchedulerErrorRateHigh"]["expr"]
    assert "< 0.95" in by_name["SchedulerSuccessRateLow"]["expr"]
    assert "> 10000" in by_name["SchedulerQueueDepthHigh"]["expr"]
    # The design document: a queue depth over 10k pages.
    assert by_name["SchedulerQueueDepthHigh"]["labels"]["severity"] == "critical"
    assert 'source="database"' in by_name["SchedulerDatabaseUnavailable"]["expr"]
    assert "scheduler_leader_epoch" in by_name["SchedulerLeaderFailover"]["expr"]
    assert "scheduler_runs_waiting" in by_name["SchedulerWorkerPoolSaturated"]["expr"]
    assert by_name["SchedulerNoLeader"]["for"] == "30s"
    assert "unresponsive" in by_name["SchedulerDeadWorker"]["expr"]
    for rule in by_name.values():
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"]


def test_alert_rules_use_only_exposed_metrics():
    for name, rule in rules().items():
        used = set(METRIC.findall(rule["expr"]))
        assert used, name
        assert all(metric_exists(m) for m in used), (name, used)


def test_grafana_dashboard_uses_only_exposed_metrics():
    board = json.loads(GRAFANA.read_text())
    assert board["uid"] and board["panels"]
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    used = set()
    for panel in board["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            used |= set(METRIC.findall(target["expr"]))
    assert used and all(metric_exists(m) for m in used), sorted(used)
    # Every exposed family has a panel.
    shown = {m for m in METRIC_NAMES if any(u == m or u.startswith(m + "_") for u in used)}
    assert set(METRIC_NAMES) - shown == set()


@pytest.mark.needs_os_tool("promtool")
def test_promtool_checks_and_unit_tests_the_rules():
    check = subprocess.run(
        ["promtool", "check", "rules", str(ALERTS)], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    unit = subprocess.run(
        ["promtool", "test", "rules", ALERTS_TEST.name],
        capture_output=True,
        text=True,
        cwd=ALERTS_TEST.parent,
    )
    assert unit.returncode == 0, unit.stdout + unit.stderr
