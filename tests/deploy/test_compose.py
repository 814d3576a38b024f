"""docker-compose.yml and the Dockerfile, validated without a container engine: parsed, every
service command checked against the project's real entry points, every referenced file and
variable present."""

from __future__ import annotations

import importlib
import json
import re
import shlex
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
APP_SERVICES = {name: s for name, s in SERVICES.items() if s.get("image") == "scheduler-app"}
TIERS = {"critical", "normal", "bulk"}


def _documented_env() -> set[str]:
    names = set()
    for line in (ROOT / ".env.example").read_text().splitlines():
        match = re.match(r"^#?\s*([A-Z][A-Z0-9_]+)=", line)
        if match:
            names.add(match.group(1))
    return names


def _argv(service: dict) -> list[str]:
    command = service["command"]
    return shlex.split(command) if isinstance(command, str) else list(command)


def _option(argv: list[str], *names: str) -> str | None:
    for index, arg in enumerate(argv):
        for name in names:
            if arg == name:
                return argv[index + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def test_the_whole_topology_is_there():
    assert {
        "postgres",
        "redis",
        "redis-logs",
        "migrate",
        "web",
        "beat-a",
        "beat-b",
        "worker-critical",
        "worker-normal",
        "worker-bulk",
        "flower",
        "prometheus",
        "grafana",
        "jaeger",
    } <= set(SERVICES)


def test_redis_is_configured_as_a_queue():
    argv = _argv(SERVICES["redis"])
    assert _option(argv, "--appendonly") == "yes"
    assert _option(argv, "--appendfsync") == "everysec"
    assert _option(argv, "--maxmemory-policy") == "noeviction"


def _acl_users(rules: str) -> set[str]:
    return {
        line.split()[1]
        for line in (ROOT / "deploy" / "redis" / rules).read_text().splitlines()
        if line.startswith("user ")
    }


def _required_variable(value: str) -> str:
    """The .env variable a value is interpolated from, required (`${NAME:?...}`)."""
    match = re.fullmatch(r"\$\{([A-Z][A-Z0-9_]*):\?[^}]+\}", str(value))
    assert match, f"{value!r} is not a required variable from .env"
    return match.group(1)


@pytest.mark.parametrize(
    ("name", "rules"), [("redis", "queue.acl"), ("redis-logs", "live-logs.acl")]
)
def test_both_redis_servers_require_credentials_from_the_env_file(name, rules):
    service = SERVICES[name]
    argv = _argv(service)
    # Started by the script that writes the ACL users (`default` off) from the rules.
    assert argv[:2] == ["sh", "/etc/redis/start-redis.sh"]
    assert "./deploy/redis:/etc/redis:ro" in service["volumes"]
    assert service["environment"]["REDIS_ACL_RULES"] == f"/etc/redis/{rules}"
    script = (ROOT / "deploy" / "redis" / "start-redis.sh").read_text()
    assert 'echo "user default off' in script
    # Every user of the rules gets its password from .env, never a value in the file.
    for user in _acl_users(rules) - {"keda"}:
        variable = _required_variable(service["environment"][f"REDIS_{user.upper()}_PASSWORD"])
        assert variable == f"REDIS_{user.upper()}_PASSWORD"
        assert variable in _documented_env()
    assert "probe" in " ".join(service["healthcheck"]["test"])


def test_each_app_service_connects_as_its_own_redis_user_with_its_password():
    users = {}
    for name, service in APP_SERVICES.items():
        env = service["environment"]
        assert env["REDIS_URL"] == "redis://redis:6379/0" and "@" not in env["REDIS_URL"]
        assert env["LIVE_LOGS_REDIS_URL"] == "redis://redis-logs:6379/0"
        user = env["REDIS_USERNAME"]
        assert user in _acl_users("queue.acl"), name
        # The same variable the Redis server takes that user's password from.
        assert _required_variable(env["REDIS_PASSWORD"]) == _required_variable(
            SERVICES["redis"]["environment"][f"REDIS_{user.upper()}_PASSWORD"]
        )
        users[name] = user
    assert users["web"] == users["migrate"] == "web"
    assert {users[n] for n in ("beat-a", "beat-b")} == {"beat"}
    assert {users[n] for n in APP_SERVICES if n.startswith("worker-")} == {"worker"}
    assert users["flower"] == "flower"
    # Who reads and writes live log tails has a user on that server too.
    assert {"web", "worker"} <= _acl_users("live-logs.acl")
    assert "flower" not in _acl_users("live-logs.acl")


def test_the_live_log_redis_may_evict_and_keeps_nothing_on_disk():
    argv = _argv(SERVICES["redis-logs"])
    assert _option(argv, "--maxmemory-policy") == "allkeys-lru"
    assert _option(argv, "--maxmemory")
    assert _option(argv, "--appendonly") == "no"
    for name in APP_SERVICES:
        if name != "migrate":
            assert APP_SERVICES[name]["depends_on"]["redis-logs"]["condition"] == "service_healthy"


def test_no_password_is_written_in_the_compose_file():
    """Passwords come from .env (compose refuses to start without them), never the file."""
    for name, service in SERVICES.items():
        for key, value in (service.get("environment") or {}).items():
            if "PASSWORD" in key:
                _required_variable(value)
            if "://" in str(value) and "@" in str(value):
                assert re.search(r"://[^:/@]*:\$\{[A-Z0-9_]+:\?[^}]+\}@", str(value)), (name, key)


def _assert_asgi_server(argv: list[str]) -> None:
    """gunicorn with the shared config (uvicorn workers) serving the ASGI application."""
    config = _option(argv, "--config", "-c")
    assert config and config.startswith("python:"), argv
    conf = importlib.import_module(config.removeprefix("python:"))
    worker_module, _, worker_class = conf.worker_class.rpartition(".")
    assert worker_class == "UvicornWorker" and hasattr(
        importlib.import_module(worker_module), worker_class
    )
    module, _, attribute = argv[-1].partition(":")
    assert module == "project.asgi"
    assert callable(getattr(importlib.import_module(module), attribute))


@pytest.mark.parametrize("name", sorted(APP_SERVICES))
def test_every_app_command_is_a_real_entry_point(name):
    from django.core.management import get_commands

    argv = _argv(APP_SERVICES[name])
    program = argv[0]
    if program == "gunicorn":
        _assert_asgi_server(argv)
    elif program == "python":
        assert argv[1] == "manage.py" and (ROOT / "manage.py").exists()
        assert argv[2] in get_commands(), f"{argv[2]} is not a management command"
    elif program == "celery":
        assert _option(argv, "-A", "--app") == "project"
        from project.celery import app

        assert app.main == "project"
        subcommand = next(a for a in argv[1:] if a in ("worker", "beat", "flower"))
        if subcommand == "beat":
            module, _, attribute = _option(argv, "-S", "--scheduler").partition(":")
            assert hasattr(importlib.import_module(module), attribute)
        if subcommand == "worker":
            queues = set(_option(argv, "-Q", "--queues").split(","))
            assert queues <= TIERS
    else:
        pytest.fail(f"{name}: unknown program {program}")
    assert APP_SERVICES[name].get("restart") in ("unless-stopped", "always", "no")


def _assert_asgi_server(argv: list[str]) -> None:
    """gunicorn with the shared config (uvicorn workers) serving the ASGI application."""
    config = _option(argv, "--config", "-c")
    assert config and config.startswith("python:"), argv
    conf = importlib.import_module(config.removeprefix("python:"))
    worker_module, _, worker_class = conf.worker_class.rpartition(".")
    assert worker_class == "UvicornWorker" and hasattr(
        importlib.import_module(worker_module), worker_class
    )
    module, _, attribute = argv[-1].partition(":")
    assert module == "project.asgi"
    assert callable(getattr(importlib.import_module(module), attribute))


def test_one_worker_service_per_tier_and_two_beats():
    consumed = {}
    for name, service in APP_SERVICES.items():
        argv = _argv(service)
        if "worker" in argv:
            consumed[name] = set(_option(argv, "-Q").split(","))
            assert int(_option(argv, "-c", "--concurrency")) >= 1
    assert sorted(q for queues in consumed.values() for q in queues) == sorted(TIERS)
    beats = [n for n, s in APP_SERVICES.items() if "beat" in _argv(s)]
    assert len(beats) == 2
    node_ids = {APP_SERVICES[b]["environment"]["SCHEDULER_NODE_ID"] for b in beats}
    assert len(node_ids) == 2


def test_long_running_services_have_health_checks_and_restart_policies():
    for name, service in SERVICES.items():
        if name == "migrate":
            assert service["restart"] == "no"
            continue
        assert service.get("restart") == "unless-stopped", name
        if name not in ("beat-a", "beat-b"):  # beats report through scheduler status instead
            assert "healthcheck" in service, name


def test_web_health_check_hits_a_real_url():
    from django.urls import resolve

    test = " ".join(SERVICES["web"]["healthcheck"]["test"])
    path = re.search(r"http://127\.0\.0\.1:8000(/[^'\"]*)", test).group(1)
    resolve(path)


def test_migrate_runs_once_before_the_app():
    assert _argv(SERVICES["migrate"])[:3] == ["python", "manage.py", "migrate"]
    for name, service in APP_SERVICES.items():
        if name != "migrate":
            assert service["depends_on"]["migrate"]["condition"] == (
                "service_completed_successfully"
            )


def test_flower_requires_basic_auth_from_the_env_file():
    assert "FLOWER_BASIC_AUTH" in _documented_env()
    assert SERVICES["flower"]["env_file"] == ".env"


def test_app_runs_with_production_settings_and_secrets_come_from_the_env_file(monkeypatch):
    from cryptography.fernet import Fernet

    for name, service in APP_SERVICES.items():
        assert service["environment"]["DJANGO_SETTINGS_MODULE"] == "project.settings.production"
        assert service["env_file"] == ".env", name
    # The module loads with real keys (without them it refuses: test_keys_refusal.py).
    monkeypatch.setenv("SECRET_KEY", "Qv7-" + "production-secret-key-0123456789-abcdefghijklmnop")
    monkeypatch.setenv("SECRETS_KEY", Fernet.generate_key().decode())
    monkeypatch.delitem(sys.modules, "project.settings.production", raising=False)
    importlib.import_module("project.settings.production")
    monkeypatch.delitem(sys.modules, "project.settings.production")


def test_every_referenced_file_exists():
    for name, service in SERVICES.items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("."):
                assert (ROOT / source).exists(), f"{name}: {source}"
            else:
                assert source in COMPOSE["volumes"], f"{name}: undeclared volume {source}"
        if service.get("build"):
            assert (ROOT / service["build"] / "Dockerfile").exists()
    assert (ROOT / ".env.example").exists()


def test_every_variable_the_compose_file_and_settings_read_is_documented():
    documented = _documented_env()
    compose_text = (ROOT / "docker-compose.yml").read_text()
    used = set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", compose_text))
    for path in (ROOT / "project" / "settings").glob("*.py"):
        if path.name.startswith("test"):
            continue
        used |= set(
            re.findall(r"env_(?:str|int|float|bool|list)\(\s*\"([A-Z0-9_]+)\"", path.read_text())
        )
        # A secret is also read from NAME_FILE.
        for name in re.findall(r"env_secret\(\s*\"([A-Z0-9_]+)\"", path.read_text()):
            used |= {name, f"{name}_FILE"}
    assert used - documented == set()


def test_prometheus_scrapes_the_app_and_loads_the_alert_rules():
    config = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    (job,) = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    assert job["static_configs"][0]["targets"] == ["web:8000"]
    mounted = {v.split(":")[1] for v in SERVICES["prometheus"]["volumes"] if v.startswith(".")}
    assert set(config["rule_files"]) <= mounted


def _documented_metrics() -> set[str]:
    text = (ROOT / "deploy/README.md").read_text()
    return set(re.findall(r"^\| `([a-z_]+)` \|", text, flags=re.MULTILINE))


def _metric_names(expr: str) -> set[str]:
    names = set(re.findall(r"\b(scheduler_[a-z_]+|up)\b(?=\s*[{\[)]|\s*[<>=]|\s*$)", expr))
    return {re.sub(r"_(bucket|sum|count|total)$", "", n) for n in names}


def test_alert_rules_are_well_formed_and_use_documented_metrics():
    rules = yaml.safe_load((ROOT / "deploy/prometheus/alerts.yml").read_text())
    documented = _documented_metrics()
    count = 0
    for group in rules["groups"]:
        for rule in group["rules"]:
            count += 1
            assert rule["alert"] and rule["expr"]
            assert rule["labels"]["severity"] in ("critical", "warning", "info")
            assert rule["annotations"]["summary"]
            assert _metric_names(rule["expr"]) <= documented, rule["alert"]
    assert count >= 5


def test_grafana_dashboard_is_provisioned_and_uses_documented_metrics():
    dashboard = json.loads((ROOT / "deploy/grafana/dashboard.json").read_text())
    documented = _documented_metrics()
    assert dashboard["panels"]
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            assert _metric_names(target["expr"]) <= documented, panel["title"]
    mounts = {v.split(":")[1] for v in SERVICES["grafana"]["volumes"] if v.startswith(".")}
    provider = yaml.safe_load(
        (ROOT / "deploy/grafana/provisioning/dashboards/scheduler.yml").read_text()
    )
    path = provider["providers"][0]["options"]["path"]
    assert any(m.startswith(path) and m.endswith(".json") for m in mounts)


def test_dockerfile_runs_as_a_non_root_user_and_its_entry_point_exists():
    lines = [
        line.strip()
        for line in (ROOT / "Dockerfile").read_text().replace("\\\n", " ").splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    instructions = [(line.split()[0].upper(), line.split(None, 1)[1]) for line in lines]
    assert instructions[0][0] == "FROM" and "python:3.11" in instructions[0][1]
    users = [arg for op, arg in instructions if op == "USER"]
    assert users and users[-1] not in ("root", "0")
    last_user = max(i for i, (op, _) in enumerate(instructions) if op == "USER")
    assert all(op != "RUN" for op, _ in instructions[last_user + 1 :])
    for op, arg in instructions:
        if op == "COPY":
            for source in arg.split()[:-1]:
                assert (ROOT / source).exists(), source
        if op == "ENV" and "DJANGO_SETTINGS_MODULE" in arg:
            module = re.search(r"DJANGO_SETTINGS_MODULE=(\S+)", arg).group(1)
            importlib.import_module(module)
    cmd = json.loads(next(arg for op, arg in instructions if op == "CMD"))
    assert cmd[0] == "gunicorn"
    _assert_asgi_server(cmd)
    # The image and compose's web service run the same server the same way.
    assert _argv(SERVICES["web"]) == cmd
    # WhiteNoise serves what collectstatic wrote at build time.
    assert any(op == "RUN" and "collectstatic --noinput" in arg for op, arg in instructions)
    requirements = (ROOT / "requirements.txt").read_text()
    for pinned in ("gunicorn==", "uvicorn-worker==", "whitenoise=="):
        assert pinned in requirements


def test_the_env_file_never_goes_into_the_image():
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".env", ".venv", ".git"} <= ignored


def test_workers_get_what_bubblewrap_needs_and_nothing_more():
    workers = [name for name in SERVICES if name.startswith("worker-")]
    assert workers
    for name in workers:
        service = SERVICES[name]
        assert set(service["security_opt"]) == {
            "seccomp=unconfined",
            "apparmor=unconfined",
            "systempaths=unconfined",
            "no-new-privileges:true",
        }
        assert service["cap_drop"] == ["ALL"]
        assert "cap_add" not in service and not service.get("privileged")
        assert "user" not in service  # the image's non-root user
    assert "security_opt" not in SERVICES["web"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "bubblewrap" in dockerfile and "slirp4netns" in dockerfile
    assert "iproute2" in dockerfile  # the egress filter's `ip` (sandbox/egress_filter.py)


@pytest.mark.parametrize("name", ["flower", "prometheus", "grafana", "jaeger"])
def test_operator_tools_listen_on_loopback_only(name):
    for mapping in SERVICES[name]["ports"]:
        assert str(mapping).startswith("127.0.0.1:"), (name, mapping)


def test_prometheus_sends_the_metrics_token():
    prometheus = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    [job] = [j for j in prometheus["scrape_configs"] if j["job_name"] == "scheduler"]
    authorization = job["authorization"]
    assert authorization["type"] == "Bearer"
    # The file is the compose secret made from METRICS_BEARER_TOKEN, which the app checks.
    assert SERVICES["prometheus"]["secrets"] == ["metrics_token"]
    assert authorization["credentials_file"] == "/run/secrets/metrics_token"
    assert COMPOSE["secrets"]["metrics_token"]["environment"] == "METRICS_BEARER_TOKEN"
    assert "METRICS_BEARER_TOKEN" in _documented_env()
    # Compose refuses to start the app without the token, so /metrics is never left open
    # to nobody (or closed to Prometheus).
    assert ":?" in SERVICES["web"]["environment"]["METRICS_BEARER_TOKEN"]


# Images that would be a reverse proxy in front of the app (none is in this file today).
PROXY_IMAGES = ("nginx", "traefik", "caddy", "haproxy", "envoy")


def test_the_login_throttle_trusts_exactly_the_proxies_in_front_of_web():
    """The throttle counts per (user name, client address): web must be told how many proxies
    append to X-Forwarded-For. None runs in this file and port 8000 is published directly, so
    0 (a higher count would let a client forge the address it is counted under)."""
    env = SERVICES["web"]["environment"]
    assert env["LOGIN_TRUSTED_PROXIES"] == "${LOGIN_TRUSTED_PROXIES:-0}"
    proxies = [
        name
        for name, service in SERVICES.items()
        if str(service.get("image", "")).split(":")[0].split("/")[-1] in PROXY_IMAGES
    ]
    assert proxies == []
    assert "8000:8000" in SERVICES["web"]["ports"]
    assert "LOGIN_TRUSTED_PROXIES" in _documented_env()


def test_the_app_services_export_traces_to_the_jaeger_in_the_file():
    # OTLP/HTTP on 4318 inside the network; the UI published on loopback only (above).
    for name, service in APP_SERVICES.items():
        endpoint = service["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"]
        assert endpoint == "${OTEL_EXPORTER_OTLP_ENDPOINT-http://jaeger:4318}", name
    assert SERVICES["jaeger"]["image"].startswith("jaegertracing/all-in-one:")
    assert "4318" not in str(SERVICES["jaeger"].get("ports"))
    assert "{trace_id}" in SERVICES["web"]["environment"]["OTEL_TRACE_UI_URL"]
