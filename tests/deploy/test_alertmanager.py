"""deploy/alertmanager/: the configuration checked by the real `amtool`, its routes asked of
amtool, its copies (the Kubernetes ConfigMap) kept equal, its wiring into compose and
Prometheus, the start script's refusal of placeholder keys, and an end-to-end run: a real
Alertmanager with the same routes and inhibitions, its receivers' endpoints pointed at local
stand-ins (the PagerDuty one checks the Events API v2 format: tests/alerting/services.py),
alerts posted to its API v2, and what the stand-ins received."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from tests.alerting.receiver import Receiver
from tests.alerting.services import ServiceReceiver
from tests.processes import wait_until

ROOT = Path(__file__).resolve().parents[2]
AM_DIR = ROOT / "deploy" / "alertmanager"
CONFIG = AM_DIR / "alertmanager.yml"
START = AM_DIR / "start-alertmanager.sh"
KUBE = ROOT / "deploy" / "kubernetes" / "alertmanager.yaml"
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
PROMETHEUS = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
ROUTING_KEY = "R0UT1NGK3Y0000000000000000000000"
RUNBOOK = "https://scheduler.example.com/manual/operations/runbooks.html#"


def _amtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [shutil.which("amtool") or "amtool", *args], capture_output=True, text=True, timeout=60
    )


@pytest.mark.needs_os_tool("alertmanager")
def test_amtool_accepts_the_configuration():
    checked = _amtool("check-config", str(CONFIG))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout


@pytest.mark.needs_os_tool("alertmanager")
@pytest.mark.parametrize(
    ("labels", "receiver"),
    [
        (["alertname=SchedulerNoLeader", "severity=critical"], "pagerduty"),
        (["alertname=SchedulerQueueDepthHigh", "severity=critical", "tier=bulk"], "pagerduty"),
        (["alertname=SchedulerErrorRateHigh", "severity=warning", "tenant=acme"], "slack"),
        (["alertname=SchedulerLeaderFailover", "severity=warning"], "slack"),
    ],
)
def test_critical_pages_and_warning_goes_to_slack(labels, receiver):
    routed = _amtool("config", "routes", "test", f"--config.file={CONFIG}", *labels)
    assert routed.returncode == 0, routed.stdout + routed.stderr
    assert routed.stdout.split() == [receiver]


def test_no_key_is_written_in_the_configuration():
    config = yaml.safe_load(CONFIG.read_text())
    (pagerduty,) = next(r for r in config["receivers"] if r["name"] == "pagerduty")[
        "pagerduty_configs"
    ]
    (slack,) = next(r for r in config["receivers"] if r["name"] == "slack")["slack_configs"]
    assert set(pagerduty) & {"routing_key", "service_key"} == set()
    assert pagerduty["routing_key_file"].startswith("/run/secrets/")
    assert "api_url" not in slack and slack["api_url_file"].startswith("/run/secrets/")
    # The runbook travels: PagerDuty's links and Slack's button.
    assert "runbook_url" in pagerduty["links"][0]["href"]
    assert "runbook_url" in slack["actions"][0]["url"]


def test_a_database_outage_inhibits_the_alerts_it_causes():
    config = yaml.safe_load(CONFIG.read_text())
    (outage,) = [
        rule
        for rule in config["inhibit_rules"]
        if rule["source_matchers"] == ['alertname="SchedulerDatabaseUnavailable"']
    ]
    alerts = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yml").read_text())
    names = {r["alert"] for g in alerts["groups"] for r in g["rules"]}
    (matcher,) = outage["target_matchers"]
    inhibited = set(matcher.split("=~", 1)[1].strip('"').split("|"))
    assert inhibited == names - {"SchedulerDatabaseUnavailable"}


def test_the_kubernetes_config_map_holds_the_files_as_they_are():
    config_map = next(
        d for d in yaml.safe_load_all(KUBE.read_text()) if d and d["kind"] == "ConfigMap"
    )
    assert config_map["data"]["alertmanager.yml"] == CONFIG.read_text()
    assert config_map["data"]["start-alertmanager.sh"] == START.read_text()


def test_compose_runs_alertmanager_and_prometheus_sends_to_it():
    service = COMPOSE["services"]["alertmanager"]
    mounted = {v.split(":")[0]: v.split(":")[1] for v in service["volumes"] if v.startswith(".")}
    assert mounted["./deploy/alertmanager/alertmanager.yml"] == "/etc/alertmanager/alertmanager.yml"
    script = mounted["./deploy/alertmanager/start-alertmanager.sh"]
    assert service["entrypoint"] == ["/bin/sh", script]
    assert "--config.file=/etc/alertmanager/alertmanager.yml" in service["command"]
    assert set(service["secrets"]) == {
        "alertmanager_pagerduty_routing_key",
        "alertmanager_slack_webhook_url",
    }
    documented = (ROOT / ".env.example").read_text()
    for secret in service["secrets"]:
        variable = COMPOSE["secrets"][secret]["environment"]
        assert f"\n{variable}=\n" in documented  # documented, and empty: no key committed
    assert all(str(p).startswith("127.0.0.1:") for p in service["ports"])
    (target,) = PROMETHEUS["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert target == "alertmanager:9093"
    prometheus = COMPOSE["services"]["prometheus"]
    assert "--enable-feature=expand-external-labels" in prometheus["command"]
    assert PROMETHEUS["global"]["external_labels"]["manual_base_url"] == "${MANUAL_BASE_URL}"
    assert ":?" in prometheus["environment"]["MANUAL_BASE_URL"]


def _start(tmp_path: Path, *keys: str, binary: str, args: list[str]):
    files = []
    for index, key in enumerate(keys):
        path = tmp_path / f"key-{index}"
        path.write_text(key)
        files.append(str(path))
    env = {
        "PATH": os.environ["PATH"],
        "ALERTMANAGER_SECRET_FILES": " ".join(files + [str(tmp_path / "missing")] * (not keys)),
        "ALERTMANAGER_BINARY": binary,
    }
    return subprocess.run(
        ["/bin/sh", str(START), *args], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("keys", "says"),
    [
        ((), "is missing or empty"),
        (("",), "is missing or empty"),
        ((ROUTING_KEY, "https://hooks.slack.com/services/REPLACE_ME"), "holds a placeholder"),
        (("change-me",), "holds a placeholder"),
    ],
)
def test_the_start_script_refuses_a_missing_empty_or_placeholder_key(tmp_path, keys, says):
    started = _start(tmp_path, *keys, binary="/bin/true", args=[])
    assert started.returncode == 1
    assert says in started.stderr


@pytest.mark.needs_os_tool("alertmanager")
def test_the_start_script_starts_alertmanager_with_real_keys(tmp_path):
    binary = shutil.which("prometheus-alertmanager")
    started = _start(
        tmp_path,
        ROUTING_KEY,
        "https://hooks.slack.com/services/T000/B000/XXXX",
        binary=binary,
        args=["--version"],
    )
    assert started.returncode == 0, started.stderr
    assert "alertmanager, version" in started.stdout + started.stderr


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _test_config(tmp_path: Path, pagerduty_url: str, slack_url: str) -> Path:
    """The real configuration, with its routes and inhibitions as they are, its receivers'
    keys in files of the test and their endpoints on loopback; waits shortened so the test
    does not wait out production's 30 s."""
    config = yaml.safe_load(CONFIG.read_text())
    config["route"].update(group_wait="1s", group_interval="1s", repeat_interval="1h")
    (tmp_path / "routing-key").write_text(ROUTING_KEY)
    (tmp_path / "slack-url").write_text(slack_url)
    for receiver in config["receivers"]:
        for pagerduty in receiver.get("pagerduty_configs", []):
            pagerduty.update(routing_key_file=str(tmp_path / "routing-key"), url=pagerduty_url)
        for slack in receiver.get("slack_configs", []):
            slack["api_url_file"] = str(tmp_path / "slack-url")
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@pytest.fixture
def alertmanager(tmp_path):
    pagerduty, slack = ServiceReceiver(), Receiver()
    port = _free_port()
    config = _test_config(tmp_path, pagerduty.url + "/v2/enqueue", slack.url + "/slack")
    process = subprocess.Popen(
        [
            shutil.which("prometheus-alertmanager") or "prometheus-alertmanager",
            f"--config.file={config}",
            f"--storage.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as answer:
                return answer.status == 200
        except OSError:
            assert process.poll() is None, process.stderr.read().decode()
            return False

    try:
        wait_until(ready, timeout=30, message="alertmanager ready")
        yield url, pagerduty, slack
    finally:
        process.terminate()
        process.wait(timeout=30)
        pagerduty.stop()
        slack.server.shutdown()


def _post_alerts(url: str, *alerts: dict) -> None:
    body = json.dumps(
        [
            {
                "labels": alert["labels"],
                "annotations": {
                    "summary": alert["summary"],
                    "runbook_url": RUNBOOK + alert["labels"]["alertname"].lower(),
                },
            }
            for alert in alerts
        ]
    ).encode()
    request = urllib.request.Request(
        f"{url}/api/v2/alerts", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200


def _paged(pagerduty: ServiceReceiver) -> list[dict]:
    return [r for r in pagerduty.at("/v2/enqueue") if r["body"]["event_action"] == "trigger"]


def _alert_names(event: dict) -> str:
    return event["payload"]["summary"].split(":", 1)[0]


@pytest.mark.needs_os_tool("alertmanager")
def test_alerts_are_delivered_and_a_database_outage_pages_once(alertmanager):
    url, pagerduty, slack = alertmanager

    # A critical alert pages, in PagerDuty's format, its runbook in the links.
    _post_alerts(
        url,
        {
            "labels": {
                "alertname": "SchedulerQueueDepthHigh",
                "severity": "critical",
                "tier": "bulk",
            },
            "summary": "Queue bulk holds 20000 messages",
        },
    )
    [page] = wait_until(lambda: _paged(pagerduty), timeout=30, message="the page")
    assert page["errors"] == []
    event = page["body"]
    assert event["routing_key"] == ROUTING_KEY
    assert event["payload"]["severity"] == "critical"
    assert "Queue bulk holds 20000 messages" in event["payload"]["summary"]
    assert {"href": RUNBOOK + "schedulerqueuedepthhigh", "text": "Runbook"} in event["links"]

    # A warning goes to Slack, the runbook on a button.
    _post_alerts(
        url,
        {
            "labels": {
                "alertname": "SchedulerErrorRateHigh",
                "severity": "warning",
                "tenant": "acme",
            },
            "summary": "Tenant acme: 10% of runs failed in the last hour",
        },
    )
    [posted] = wait_until(lambda: slack.bodies("/slack"), timeout=30, message="the Slack post")
    (attachment,) = posted["attachments"]
    assert "SchedulerErrorRateHigh" in attachment["title"]
    assert "Tenant acme: 10% of runs failed" in attachment["text"]
    assert attachment["actions"] == [
        {"type": "button", "text": "Runbook", "url": RUNBOOK + "schedulererrorratehigh"}
    ]

    # PostgreSQL down: the outage and what it causes fire together; one page, for the outage.
    _post_alerts(
        url,
        {
            "labels": {"alertname": "SchedulerDatabaseUnavailable", "severity": "critical"},
            "summary": "The scheduler cannot read PostgreSQL",
        },
        {
            "labels": {"alertname": "SchedulerMissedSchedule", "severity": "critical"},
            "summary": "40 schedule(s) are overdue",
        },
        {
            "labels": {"alertname": "SchedulerErrorRateHigh", "severity": "warning", "tenant": "b"},
            "summary": "Tenant b: 100% of runs failed",
        },
    )
    wait_until(lambda: len(_paged(pagerduty)) == 2, timeout=30, message="the outage's page")
    assert _alert_names(_paged(pagerduty)[1]["body"]) == "SchedulerDatabaseUnavailable"

    def suppressed() -> dict:
        with urllib.request.urlopen(f"{url}/api/v2/alerts?inhibited=true", timeout=10) as answer:
            alerts = json.loads(answer.read())
        return {
            (a["labels"]["alertname"], a["labels"].get("tenant") or a["labels"].get("tier")): a[
                "status"
            ]["inhibitedBy"]
            for a in alerts
            if a["status"]["state"] == "suppressed"
        }

    # Alertmanager itself says what it holds back: the two that came with the outage, and
    # the two still firing from before (they had paged and posted before the outage began).
    expected = {
        ("SchedulerMissedSchedule", None),
        ("SchedulerErrorRateHigh", "b"),
        ("SchedulerQueueDepthHigh", "bulk"),
        ("SchedulerErrorRateHigh", "acme"),
    }
    inhibited = wait_until(
        lambda: set(suppressed()) == expected and suppressed(),
        timeout=30,
        message="the inhibition",
    )
    assert all(by for by in inhibited.values())
    # ...and an alert posted after them is delivered, while they still are not: their groups
    # were flushed (group_wait 1 s) before this one's, so nothing of theirs is coming. The
    # one alert no rule inhibits is the outage's own: a second web replica reporting it.
    _post_alerts(
        url,
        {
            "labels": {
                "alertname": "SchedulerDatabaseUnavailable",
                "severity": "critical",
                "instance": "web-2",
            },
            "summary": "The scheduler cannot read PostgreSQL",
        },
    )
    wait_until(lambda: len(_paged(pagerduty)) == 3, timeout=30, message="the barrier alert")
    assert [_alert_names(p["body"]) for p in _paged(pagerduty)] == [
        "SchedulerQueueDepthHigh",
        "SchedulerDatabaseUnavailable",
        "SchedulerDatabaseUnavailable",
    ]
    assert all(p["errors"] == [] for p in pagerduty.at("/v2/enqueue"))
    # Slack got acme's error rate, from before the outage, and nothing since.
    assert [b["attachments"][0]["title"] for b in slack.bodies("/slack")] == [
        "[FIRING] SchedulerErrorRateHigh"
    ]


class _MetricsServer:
    """Serves a fixed /metrics page: the scrape of a web process that cannot read PostgreSQL."""

    PAGE = (
        b'scheduler_scrape_errors{source="database"} 1\n'
        b'scheduler_scrape_errors{source="broker"} 0\n'
    )

    def __init__(self) -> None:
        page = self.PAGE

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.mark.needs_os_tool("promtool", "alertmanager")
def test_prometheus_expands_the_manual_url_into_the_page_alertmanager_sends(alertmanager, tmp_path):
    """The whole chain with the real tools: Prometheus (with expand-external-labels, as
    compose runs it) scrapes a web process that cannot read PostgreSQL, evaluates the real
    SchedulerDatabaseUnavailable rule (its `for` shortened), and sends it to Alertmanager,
    which pages with the runbook under MANUAL_BASE_URL in the links."""
    prometheus_binary = shutil.which("prometheus")
    assert prometheus_binary, "Debian's prometheus package ships promtool and prometheus"
    url, pagerduty, _ = alertmanager
    metrics = _MetricsServer()
    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yml").read_text())
    (rule,) = [
        r
        for g in rules["groups"]
        for r in g["rules"]
        if r["alert"] == "SchedulerDatabaseUnavailable"
    ]
    rule["for"] = "0s"
    (tmp_path / "rules.yml").write_text(
        yaml.safe_dump({"groups": [{"name": "scheduler", "rules": [rule]}]})
    )
    config = {
        "global": {
            "scrape_interval": "1s",
            "evaluation_interval": "1s",
            # As deploy/prometheus/prometheus.yml writes it.
            "external_labels": PROMETHEUS["global"]["external_labels"],
        },
        "rule_files": [str(tmp_path / "rules.yml")],
        "alerting": {
            "alertmanagers": [{"static_configs": [{"targets": [url.removeprefix("http://")]}]}]
        },
        "scrape_configs": [
            {"job_name": "scheduler", "static_configs": [{"targets": [metrics.address]}]}
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    process = subprocess.Popen(
        [
            prometheus_binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{_free_port()}",
            "--enable-feature=expand-external-labels",
        ],
        env={**os.environ, "MANUAL_BASE_URL": "https://manual.test/scheduler"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        [page] = wait_until(lambda: _paged(pagerduty), timeout=60, message="Prometheus' page")
    finally:
        process.terminate()
        process.wait(timeout=30)
        metrics.server.shutdown()
    assert page["errors"] == []
    assert _alert_names(page["body"]) == "SchedulerDatabaseUnavailable"
    assert {
        "href": "https://manual.test/scheduler/operations/runbooks.html"
        "#schedulerdatabaseunavailable",
        "text": "Runbook",
    } in page["body"]["links"]
