"""deploy/kubernetes/, validated offline: every manifest against the Kubernetes schemas
(kubernetes-validate, strict: an unknown field fails) and the ScaledObjects against KEDA's
(tests/deploy/schemas/keda-scaledobject.json); then what a schema cannot see: every image,
command, port, env var, label selector and Secret key refers to something that exists.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
import shlex
from pathlib import Path
from urllib.parse import urlparse, urlsplit

import jsonschema
import pytest
import yaml
from kubernetes_validate import utils as kubernetes_schemas

from scheduler_app.monitoring.metrics import METRIC_NAMES
from scripts.import_graph import PACKAGES

ROOT = Path(__file__).resolve().parents[2]
KUBE_DIR = ROOT / "deploy" / "kubernetes"
KUSTOMIZATION = yaml.safe_load((KUBE_DIR / "kustomization.yaml").read_text())
# The oldest Kubernetes the manifests target (Pod appArmorProfile is 1.30) and the newest
# schema kubernetes-validate ships.
KUBERNETES_VERSIONS = ("1.30.0", kubernetes_schemas.latest_version())
TIERS = ("critical", "normal", "bulk")
APP_IMAGE = "scheduler-app"
SECRET_NAME = "scheduler-secrets"
# The Secret CloudNativePG writes for the app's database owner (postgres-cluster.yaml).
DATABASE_SECRET = "scheduler-db-app"
# What the official images of the data services read (docker-compose.yml sets the same).
THIRD_PARTY_ENV = {
    # What deploy/redis/start-redis.sh reads.
    "redis:7": {"REDIS_ACL_RULES", "REDIS_PASSWORDS_DIR", "REDIS_ACL_DIR"},
    # Jaeger all-in-one's, as docker-compose.yml sets them.
    "jaegertracing/all-in-one:1.57.0": {"COLLECTOR_OTLP_ENABLED", "MEMORY_MAX_TRACES"},
}
REDIS_SECRET = "scheduler-redis"
REDIS_DIR = ROOT / "deploy" / "redis"
EGRESS_QUEUES = {f"{tier}.egress" for tier in TIERS}
POD_KINDS = ("Deployment", "StatefulSet", "Job")


def _documents() -> list[dict]:
    docs = []
    for name in KUSTOMIZATION["resources"]:
        docs += [d for d in yaml.safe_load_all((KUBE_DIR / name).read_text()) if d]
    return docs


DOCS = _documents()


def _of_kind(kind: str) -> list[dict]:
    return [d for d in DOCS if d["kind"] == kind]


def _named(kind: str, name: str) -> dict:
    (doc,) = [d for d in _of_kind(kind) if d["metadata"]["name"] == name]
    return doc


def _workloads() -> list[dict]:
    return [d for d in DOCS if d["kind"] in POD_KINDS]


def _pod(workload: dict) -> dict:
    return workload["spec"]["template"]


def _containers(workload: dict, *, init: bool = True) -> list[dict]:
    spec = _pod(workload)["spec"]
    return [*(spec.get("initContainers", []) if init else []), *spec["containers"]]


def _app_workloads() -> list[dict]:
    return [w for w in _workloads() if _pod(w)["spec"]["containers"][0]["image"] == APP_IMAGE]


def _config() -> dict[str, str]:
    return _named("ConfigMap", "scheduler-config")["data"]


def _env_names_read_by_the_project() -> set[str]:
    """Every variable the settings read through the env helper, and the few the code reads
    itself (the beat's node id, the worker's reported version)."""
    names = {"DJANGO_SETTINGS_MODULE"}
    helper = re.compile(r"env_(?:str|int|float|bool|list|secret)\(\s*\"([A-Z0-9_]+)\"")
    secret = re.compile(r"env_secret\(\s*\"([A-Z0-9_]+)\"")
    for path in (ROOT / "project" / "settings").glob("*.py"):
        if not path.name.startswith("test"):
            names |= set(helper.findall(path.read_text()))
            # A secret is also read from a file named by NAME_FILE.
            names |= {f"{name}_FILE" for name in secret.findall(path.read_text())}
    direct = re.compile(r"os\.environ\.get\(\s*\"([A-Z0-9_]+)\"")
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            names |= set(direct.findall(path.read_text()))
    return names


def _selects(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_the_kustomization_lists_every_manifest_and_nothing_else():
    on_disk = {p.name for p in KUBE_DIR.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(KUSTOMIZATION["resources"]) == on_disk
    assert KUSTOMIZATION["namespace"] == "scheduler"
    assert [i["name"] for i in KUSTOMIZATION["images"]] == [APP_IMAGE]
    names = [(d["kind"], d["metadata"]["name"]) for d in DOCS]
    assert len(names) == len(set(names)), "two objects share a kind and name"


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_manifest_is_valid_kubernetes(version):
    checked = 0
    for doc in DOCS:
        if doc["apiVersion"].startswith(("keda.sh/", "postgresql.cnpg.io/")):
            continue  # custom resources: tests/deploy/test_kubernetes_postgres.py for CNPG's
        kubernetes_schemas.validate(doc, version, strict=True)
        checked += 1
    assert checked >= 20


def test_a_wrong_field_fails_validation():
    """The validator is strict: it would catch a typo in the manifests."""
    web = json.loads(json.dumps(_named("Deployment", "web")))
    web["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_schemas.ValidationError):
        kubernetes_schemas.validate(web, KUBERNETES_VERSIONS[-1], strict=True)


def _keda_validator() -> jsonschema.Draft202012Validator:
    schema = json.loads((ROOT / "tests/deploy/schemas/keda-scaledobject.json").read_text())
    return jsonschema.Draft202012Validator(schema)


def test_scaled_objects_match_kedas_schema():
    validator = _keda_validator()
    scaled = _of_kind("ScaledObject")
    assert len(scaled) == len(TIERS)
    for doc in scaled:
        validator.validate(doc)
        # The HPA behavior KEDA passes through is Kubernetes' own type: validate it as such.
        behavior = doc["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
        hpa = {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": doc["metadata"]["name"]},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "x"},
                "maxReplicas": doc["spec"]["maxReplicaCount"],
                "behavior": behavior,
            },
        }
        kubernetes_schemas.validate(hpa, KUBERNETES_VERSIONS[-1], strict=True)


def _trigger(doc: dict, kind: str) -> dict:
    (trigger,) = [t for t in doc["spec"]["triggers"] if t["type"] == kind]
    return trigger


@pytest.mark.parametrize(
    ("kind", "broken"),
    [
        ("redis", {"listLength": "lots"}),  # not a number
        ("redis", {"listName": None}),  # required
        ("redis", {"listname": "critical"}),  # unknown key (a typo KEDA would ignore silently)
        ("prometheus", {"threshold": "lots"}),
        ("prometheus", {"query": None}),
        ("prometheus", {"serverAdress": "http://prometheus:9090"}),
        ("prometheus", {"serverAddress": "prometheus:9090"}),  # no scheme: not a URL
        ("prometheus", {"ignoreNullValues": "no"}),
    ],
)
def test_the_keda_schema_refuses_what_keda_would(kind, broken):
    doc = json.loads(json.dumps(_named("ScaledObject", "worker-critical")))
    metadata = _trigger(doc, kind)["metadata"]
    for key, value in broken.items():
        if value is None:
            metadata.pop(key)
        else:
            metadata[key] = value
    assert list(_keda_validator().iter_errors(doc)), broken


# KEDA's prometheus trigger runs this query; it must return one number, the tier's runs.
RUNS_QUERY = re.compile(r'^max\((scheduler_[a-z_]+)\{tier="([a-z]+)"\}\)$')


def test_each_tier_scales_on_its_queue_with_the_design_thresholds():
    from django.conf import settings

    config = _config()
    redis_url = urlparse(config["REDIS_URL"])
    redis_service = _named("Service", redis_url.hostname)
    assert [p["port"] for p in redis_service["spec"]["ports"]] == [redis_url.port]
    design = {"critical": 500, "normal": 1000, "bulk": 5000}
    for tier in TIERS:
        doc = _named("ScaledObject", f"worker-{tier}")
        spec = doc["spec"]
        assert sorted(t["type"] for t in spec["triggers"]) == ["prometheus", "redis"]
        names = [t["name"] for t in spec["triggers"]]
        assert len(set(names)) == len(names), "KEDA needs distinct trigger names"
        metadata = _trigger(doc, "redis")["metadata"]
        # The Redis of REDIS_URL, by its in-cluster name, and its database.
        host, port = metadata["address"].split(":")
        assert host.split(".")[:2] == [redis_url.hostname, KUSTOMIZATION["namespace"]]
        assert int(port) == redis_url.port
        assert metadata["databaseIndex"] == redis_url.path.lstrip("/")
        # kombu's Redis transport keeps the queue as a list named after it, under the prefix.
        assert metadata["listName"] == config["BROKER_KEY_PREFIX"] + tier
        # Up at the design's threshold (also what admin/queues recommends on), down under 10%.
        threshold = design[tier]
        assert int(metadata["listLength"]) == threshold
        assert int(config[f"SCALE_THRESHOLD_{tier.upper()}"]) == threshold
        assert settings.FLEET["SCALE_THRESHOLDS"][tier] == threshold
        assert int(metadata["activationListLength"]) == threshold // 10
        # The runs waiting in the tier (not the messages): a metric /metrics exposes, with
        # a tier label, at the same thresholds; a lost target must not read as zero.
        runs = _trigger(doc, "prometheus")["metadata"]
        query = RUNS_QUERY.match(runs["query"])
        assert query, runs["query"]
        assert query.groups() == ("scheduler_runs_waiting", tier)
        assert query.group(1) in METRIC_NAMES
        assert int(runs["threshold"]) == threshold
        assert int(runs["activationThreshold"]) == threshold // 10
        assert runs["ignoreNullValues"] == "false"
        behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
        assert behavior["scaleDown"]["stabilizationWindowSeconds"] == 600
        assert spec["cooldownPeriod"] == 600
        assert spec["minReplicaCount"] >= 1
        # The target is the Deployment whose workers consume exactly this tier's queue.
        target = spec["scaleTargetRef"]
        assert target["kind"] == "Deployment"
        (worker,) = _containers(_named("Deployment", target["name"]), init=False)
        argv = worker["command"]
        assert argv[argv.index("-Q") + 1] == tier
        assert "replicas" not in _named("Deployment", target["name"])["spec"]


def _parse_celery(argv: list[str]) -> tuple[str, dict]:
    """Parse a `celery ...` command line with Celery's own CLI: an unknown option, a missing
    value or a bad choice raises click's UsageError here, as it would in the container."""
    from celery.bin.base import CLIContext
    from celery.bin.celery import celery

    from project.celery import app

    index = next(i for i, arg in enumerate(argv) if arg in ("worker", "beat", "inspect"))
    group = celery.make_context("celery", argv[1:index], resilient_parsing=True)
    assert group.params["app"] == "project", argv
    group.obj = CLIContext(app=app, no_color=True, workdir=None, quiet=True)
    command = celery.get_command(group, argv[index])
    return argv[index], command.make_context(argv[index], argv[index + 1 :], parent=group).params


def _check_command(argv: list[str]) -> None:
    from django.core.management import get_commands, load_command_class

    program = argv[0]
    if program == "sh":
        assert argv[1] == "-c"
        _check_command(shlex.split(argv[2]))
    elif program == "gunicorn":
        from gunicorn.config import Config

        parsed = Config().parser().parse_args(argv[1:])
        module, _, attribute = parsed.args[0].partition(":")
        assert callable(getattr(importlib.import_module(module), attribute))
        if parsed.worker_class:
            module, _, attribute = parsed.worker_class.rpartition(".")
            assert hasattr(importlib.import_module(module), attribute)
    elif program == "python":
        assert argv[1] == "manage.py" and (ROOT / "manage.py").exists()
        commands = get_commands()
        assert argv[2] in commands, f"{argv[2]} is not a management command"
        command = load_command_class(commands[argv[2]], argv[2])
        command.create_parser("manage.py", argv[2]).parse_args(argv[3:])
    elif program == "celery":
        subcommand, params = _parse_celery(argv)
        if subcommand == "beat":
            module, _, attribute = params["scheduler"].partition(":")
            assert hasattr(importlib.import_module(module), attribute)
        if subcommand == "worker":
            # The tier queues, or the egress pool's: the egress queues alone.
            queues = set(params["queues"])
            assert queues <= set(TIERS) or queues == EGRESS_QUEUES, queues
    else:
        pytest.fail(f"unknown program {program}")


@pytest.mark.parametrize(
    "container",
    [c for w in _app_workloads() for c in _containers(w)],
    ids=[f"{w['metadata']['name']}/{c['name']}" for w in _app_workloads() for c in _containers(w)],
)
def test_every_app_command_and_probe_command_is_a_real_entry_point(container):
    _check_command(container["command"])
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        if "exec" in container.get(probe, {}):
            _check_command(container[probe]["exec"]["command"])


def test_images_are_the_app_image_or_what_compose_runs():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    compose_images = {s["image"] for s in compose["services"].values() if "image" in s}
    assert APP_IMAGE in compose_images and (ROOT / "Dockerfile").exists()
    for workload in _workloads():
        for container in _containers(workload):
            assert container["image"] in compose_images, container["image"]


def test_every_env_var_is_one_the_project_reads():
    read = _env_names_read_by_the_project()
    config = _config()
    assert set(config) <= read, set(config) - read
    # Found, not imported: the production settings refuse to load without real keys.
    assert importlib.util.find_spec(config["DJANGO_SETTINGS_MODULE"]) is not None
    config_maps = {d["metadata"]["name"] for d in _of_kind("ConfigMap")}
    for workload in _workloads():
        for container in _containers(workload):
            allowed = (
                read
                if container["image"] == APP_IMAGE
                else THIRD_PARTY_ENV.get(container["image"], set())
            )
            for var in container.get("env", []):
                assert var["name"] in allowed, f"{container['name']}: {var['name']}"
                secret = var.get("valueFrom", {}).get("secretKeyRef")
                if secret:
                    assert secret["name"] in (SECRET_NAME, DATABASE_SECRET)
            for source in container.get("envFrom", []):
                if "configMapRef" in source:
                    assert source["configMapRef"]["name"] in config_maps
                else:
                    assert source["secretRef"]["name"] == SECRET_NAME


def test_the_secret_the_manifests_expect_is_documented():
    readme = (ROOT / "deploy" / "README.md").read_text()
    command = re.search(r"kubectl -n scheduler create secret generic (\S+)(.*?)\n\n", readme, re.S)
    assert command and command.group(1) == SECRET_NAME
    keys = set(re.findall(r"--from-literal=([A-Z_]+)=", command.group(2)))
    assert {"SECRET_KEY", "SECRETS_KEY"} <= keys
    assert keys <= _env_names_read_by_the_project()
    referenced = {
        var["valueFrom"]["secretKeyRef"]["key"]
        for w in _workloads()
        for c in _containers(w)
        for var in c.get("env", [])
        if var.get("valueFrom", {}).get("secretKeyRef", {}).get("name") == SECRET_NAME
    }
    assert referenced <= keys


def test_ports_services_and_probes_line_up():
    from django.urls import resolve

    allowed_hosts = _config()["ALLOWED_HOSTS"].split(",")
    for workload in _workloads():
        pod = _pod(workload)
        ports = {
            p.get("name"): p["containerPort"]
            for c in pod["spec"]["containers"]
            for p in c.get("ports", [])
        }
        for container in pod["spec"]["containers"]:
            if container.get("command", [""])[0] == "gunicorn":
                # project/gunicorn_conf.py binds WEB_BIND; a --bind on the command wins.
                command = container["command"]
                env = {var["name"]: var.get("value") for var in container.get("env", [])}
                bind = (
                    command[command.index("--bind") + 1]
                    if "--bind" in command
                    else env.get("WEB_BIND", "0.0.0.0:8000")
                )
                assert int(bind.rsplit(":", 1)[1]) in ports.values()
            for probe in ("livenessProbe", "readinessProbe"):
                http = container.get(probe, {}).get("httpGet")
                if http:
                    assert http["port"] in ports or http["port"] in ports.values()
                    if container["image"] != APP_IMAGE:
                        # Alertmanager's own /-/ready, /-/healthy (test_alertmanager.py).
                        continue
                    resolve(http["path"])
                    (host,) = [h["value"] for h in http["httpHeaders"] if h["name"] == "Host"]
                    assert host in allowed_hosts
    for service in _of_kind("Service"):
        selected = [
            w
            for w in _workloads()
            if _selects(service["spec"]["selector"], _pod(w)["metadata"]["labels"])
        ]
        assert selected, service["metadata"]["name"]
        for port in service["spec"]["ports"]:
            for workload in selected:
                container_ports = [
                    p for c in _pod(workload)["spec"]["containers"] for p in c.get("ports", [])
                ]
                target = port["targetPort"]
                assert any(target in (p.get("name"), p["containerPort"]) for p in container_ports)


def test_web_probes_are_healthz_and_readyz():
    (web,) = _containers(_named("Deployment", "web"), init=False)
    assert web["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert web["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_workers_have_a_liveness_probe_that_pings_their_own_node():
    for tier in TIERS:
        (worker,) = _containers(_named("Deployment", f"worker-{tier}"), init=False)
        node = worker["command"][worker["command"].index("-n") + 1]
        probe = shlex.split(worker["livenessProbe"]["exec"]["command"][2])
        assert probe[probe.index("ping") + 2] == node.replace("%h", "$HOSTNAME")


def _service_account_may(name: str) -> set[tuple[str, str, str]]:
    """(API group, resource, verb) the service account is granted by the manifests' roles."""
    roles = {
        binding["roleRef"]["name"]
        for binding in _of_kind("RoleBinding") + _of_kind("ClusterRoleBinding")
        if any(s["kind"] == "ServiceAccount" and s["name"] == name for s in binding["subjects"])
    }
    assert not _of_kind("ClusterRoleBinding"), "no account is granted anything cluster-wide"
    return {
        (group, resource, verb)
        for role in _of_kind("Role")
        if role["metadata"]["name"] in roles
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_every_container_is_non_root_read_only_and_sized():
    for workload in _workloads():
        pod = _pod(workload)["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        if workload["metadata"]["name"] == "beat":
            # Its token may only read KEDA's ScaledObjects (the saturation alert's check).
            assert pod["automountServiceAccountToken"] is True
            assert _service_account_may(pod["serviceAccountName"]) == {
                ("keda.sh", "scaledobjects", "get"),
                ("keda.sh", "scaledobjects", "list"),
            }
        else:
            assert pod["automountServiceAccountToken"] is False
            assert "serviceAccountName" not in pod
        for container in _containers(workload):
            security = container["securityContext"]
            assert security["readOnlyRootFilesystem"] is True, container["name"]
            assert security["allowPrivilegeEscalation"] is False, container["name"]
            assert security["capabilities"]["drop"] == ["ALL"]
            assert "add" not in security["capabilities"]
            assert set(container["resources"]) == {"requests", "limits"}, container["name"]
            assert {"cpu", "memory"} <= set(container["resources"]["requests"])
            assert {"cpu", "memory"} <= set(container["resources"]["limits"])


def test_only_workers_relax_seccomp_and_apparmor_for_the_sandbox():
    for workload in _workloads():
        security = _pod(workload)["spec"]["securityContext"]
        component = _pod(workload)["metadata"]["labels"]["app.kubernetes.io/component"]
        if component == "worker":
            assert security["seccompProfile"]["type"] == "Unconfined"
            assert security["appArmorProfile"]["type"] == "Unconfined"
        else:
            assert security["seccompProfile"]["type"] == "RuntimeDefault"
            assert "appArmorProfile" not in security


def test_two_beats_on_different_nodes_with_their_own_node_ids():
    beat = _named("Deployment", "beat")
    assert beat["spec"]["replicas"] == 2
    pod = _pod(beat)["spec"]
    hard = [
        c
        for c in pod["topologySpreadConstraints"]
        if c["topologyKey"] == "kubernetes.io/hostname"
        and c["whenUnsatisfiable"] == "DoNotSchedule"
    ]
    assert hard and _selects(
        hard[0]["labelSelector"]["matchLabels"], _pod(beat)["metadata"]["labels"]
    )
    (container,) = pod["containers"]
    node_id = next(e for e in container["env"] if e["name"] == "SCHEDULER_NODE_ID")
    assert node_id["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert beat["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_web_is_autoscaled_and_every_deployment_has_a_disruption_budget():
    (hpa,) = _of_kind("HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == "web"
    assert hpa["spec"]["minReplicas"] >= 2
    budgets = _of_kind("PodDisruptionBudget")
    for deployment in _of_kind("Deployment"):
        labels = _pod(deployment)["metadata"]["labels"]
        covering = [b for b in budgets if _selects(b["spec"]["selector"]["matchLabels"], labels)]
        assert len(covering) == 1, deployment["metadata"]["name"]
    assert _named("PodDisruptionBudget", "beat")["spec"]["minAvailable"] == 1


def test_migrations_run_in_a_job_and_app_pods_wait_for_them():
    job = _named("Job", "migrate")
    (container,) = _containers(job)
    assert container["command"][:3] == ["python", "manage.py", "migrate"]
    for deployment in _of_kind("Deployment"):
        if _pod(deployment)["spec"]["containers"][0]["image"] != APP_IMAGE:
            continue
        (init,) = _pod(deployment)["spec"]["initContainers"]
        assert init["command"][:3] == ["python", "manage.py", "migrate"]
        assert "--check" in init["command"]


def test_only_the_app_pods_and_keda_reach_postgresql_and_redis():
    policies = _of_kind("NetworkPolicy")
    deny = [p for p in policies if p["spec"]["podSelector"] == {}]
    assert (
        deny and deny[0]["spec"]["policyTypes"] == ["Ingress"] and "ingress" not in deny[0]["spec"]
    )
    app_pods = {w["metadata"]["name"] for w in _app_workloads()}
    for component, port in (("postgres", 5432), ("redis", 6379), ("redis-logs", 6379)):
        guarding = [
            p
            for p in policies
            if p["spec"]["podSelector"].get("matchLabels")
            == {"app.kubernetes.io/component": component}
        ]
        assert len(guarding) == 1, component
        (rule,) = guarding[0]["spec"]["ingress"]
        assert [p["port"] for p in rule["ports"]] == [port]
        allowed: dict[str, set[str]] = {}
        for peer in rule["from"]:
            if "podSelector" in peer:
                (label,) = peer["podSelector"]["matchLabels"]
                allowed[label] = {
                    w["metadata"]["name"]
                    for w in _workloads()
                    if _selects(peer["podSelector"]["matchLabels"], _pod(w)["metadata"]["labels"])
                }
            else:
                assert component == "redis"
                assert peer["namespaceSelector"]["matchLabels"] == {
                    "kubernetes.io/metadata.name": "keda"
                }
        # Every app workload (they all use all three) and nothing else: not the data
        # services themselves. The egress pool only by its own label, never as a data client.
        assert set().union(*allowed.values()) == app_pods, component
        assert allowed["scheduler.io/egress-worker"] == {"worker-egress"}
        assert "worker-egress" not in allowed["scheduler.io/data-client"]


def test_egress_runs_run_on_a_pool_that_is_no_data_client():
    pool = _named("Deployment", "worker-egress")
    labels = _pod(pool)["metadata"]["labels"]
    assert "scheduler.io/data-client" not in labels
    assert labels["scheduler.io/egress-worker"] == "true"
    (container,) = _containers(pool, init=False)
    argv = container["command"]
    # It consumes the egress queues of every tier, and nothing else.
    assert set(argv[argv.index("-Q") + 1].split(",")) == EGRESS_QUEUES
    env = {var["name"]: var.get("value") for var in container["env"]}
    assert env["WORKER_SHELL_EGRESS"] == "true"
    # Every other worker refuses egress runs and does not consume their queues.
    assert _config()["WORKER_SHELL_EGRESS"] == "false"
    for workload in _app_workloads():
        if workload["metadata"]["name"] == "worker-egress":
            continue
        for other in _containers(workload, init=False):
            names = {var["name"] for var in other.get("env", [])}
            assert "WORKER_SHELL_EGRESS" not in names, workload["metadata"]["name"]
            if "worker" in other["command"]:
                queues = other["command"][other["command"].index("-Q") + 1].split(",")
                assert not EGRESS_QUEUES & set(queues)
    # What routes a run there: its capability's queue (scheduler_app.capabilities).
    from scheduler_app.capabilities import queue_for

    assert {queue_for(priority=p, capability="egress") for p in (1, 5, 9)} == EGRESS_QUEUES


def test_the_egress_pool_reaches_dns_the_data_services_and_the_internet_only():
    (policy,) = [
        p
        for p in _of_kind("NetworkPolicy")
        if p["spec"]["podSelector"] == {"matchLabels": {"scheduler.io/egress-worker": "true"}}
    ]
    assert policy["spec"]["policyTypes"] == ["Egress"]
    selected = [
        w["metadata"]["name"]
        for w in _workloads()
        if _selects(policy["spec"]["podSelector"]["matchLabels"], _pod(w)["metadata"]["labels"])
    ]
    assert selected == ["worker-egress"]
    pods, blocks = set(), []
    for rule in policy["spec"]["egress"]:
        for peer in rule["to"]:
            if "ipBlock" in peer:
                blocks.append(peer["ipBlock"])
            else:
                assert "ports" in rule  # a named service's port, not the whole pod
                pods.add(tuple(sorted(peer["podSelector"]["matchLabels"].items())))
    assert pods == {
        (("k8s-app", "kube-dns"),),
        (("app.kubernetes.io/component", "postgres"),),
        (("app.kubernetes.io/component", "redis"),),
        (("app.kubernetes.io/component", "redis-logs"),),
        (("app.kubernetes.io/component", "jaeger"),),
    }
    (block,) = blocks
    assert block["cidr"] == "0.0.0.0/0"
    import ipaddress

    refused = [ipaddress.ip_network(cidr) for cidr in block["except"]]
    for address in ("10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "127.0.0.1"):
        assert any(ipaddress.ip_address(address) in net for net in refused), address


def _redis_servers() -> dict[str, dict]:
    return {
        w["metadata"]["name"]: w
        for w in _workloads()
        if _pod(w)["spec"]["containers"][0]["image"].startswith("redis:")
    }


def test_both_redis_servers_require_credentials_from_the_secret():
    config_map = _named("ConfigMap", "redis-acl")
    # The very files compose mounts (deploy/redis/), byte for byte.
    for name in ("start-redis.sh", "queue.acl", "live-logs.acl"):
        assert config_map["data"][name] == (REDIS_DIR / name).read_text(), name
    assert 'echo "user default off' in config_map["data"]["start-redis.sh"]
    servers = _redis_servers()
    assert set(servers) == {"redis", "redis-logs"}
    for name, rules in (("redis", "queue.acl"), ("redis-logs", "live-logs.acl")):
        (container,) = _containers(servers[name])
        assert container["command"][:2] == ["sh", "/etc/redis/start-redis.sh"]
        env = {var["name"]: var["value"] for var in container["env"]}
        assert env["REDIS_ACL_RULES"] == f"/etc/redis/{rules}"
        volumes = {v["name"]: v for v in _pod(servers[name])["spec"]["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert volumes[mounts["/etc/redis"]]["configMap"]["name"] == "redis-acl"
        secret = volumes[mounts[env["REDIS_PASSWORDS_DIR"]]]["secret"]
        assert secret["secretName"] == REDIS_SECRET
        users = {
            line.split()[1]
            for line in (REDIS_DIR / rules).read_text().splitlines()
            if line.startswith("user ")
        }
        # Each user's password, and only this server's users' (Flower runs in compose only).
        assert {item["key"] for item in secret["items"]} == users - {"flower"}
        assert all(item["path"] == item["key"] for item in secret["items"])
        for probe in ("readinessProbe", "livenessProbe"):
            assert "--user probe" in " ".join(container[probe]["exec"]["command"])


def test_every_app_process_connects_as_its_own_redis_user_with_a_password_file():
    queue_users = {
        line.split()[1]
        for line in (REDIS_DIR / "queue.acl").read_text().splitlines()
        if line.startswith("user ")
    }
    expected = {"web": "web", "migrate": "web", "beat": "beat"}
    for workload in _app_workloads():
        name = workload["metadata"]["name"]
        (container,) = _containers(workload, init=False)
        env = {var["name"]: var.get("value") for var in container["env"]}
        user = env["REDIS_USERNAME"]
        assert user == expected.get(name, "worker"), name
        assert user in queue_users
        # The password is a file from the Secret, holding that user's key only; never an
        # environment variable (a sandbox could not read one either, but a file is tidier).
        assert "REDIS_PASSWORD" not in env
        path = env["REDIS_PASSWORD_FILE"]
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in _pod(workload)["spec"]["volumes"]}
        secret = volumes[mounts[path.rsplit("/", 1)[0]]]["secret"]
        assert secret["secretName"] == REDIS_SECRET
        assert secret["items"] == [{"key": user, "path": path.rsplit("/", 1)[1]}]
    config = _config()
    assert "@" not in config["REDIS_URL"] and "@" not in config["LIVE_LOGS_REDIS_URL"]
    assert urlparse(config["LIVE_LOGS_REDIS_URL"]).hostname == "redis-logs"
    for workload in _workloads():
        for container in _containers(workload):
            for var in container.get("env", []):
                if var["name"].endswith("PASSWORD"):
                    assert "value" not in var, (workload["metadata"]["name"], var["name"])


def test_keda_reads_the_queues_as_its_own_redis_user():
    (auth,) = _of_kind("TriggerAuthentication")
    refs = {ref["parameter"]: ref for ref in auth["spec"]["secretTargetRef"]}
    assert set(refs) == {"username", "password"}
    assert {ref["name"] for ref in refs.values()} == {REDIS_SECRET}
    assert refs["password"]["key"] == "keda"
    for doc in _of_kind("ScaledObject"):
        assert _trigger(doc, "redis")["authenticationRef"] == {"name": auth["metadata"]["name"]}
    readme = (ROOT / "deploy" / "README.md").read_text()
    command = re.search(
        r"kubectl -n scheduler create secret generic scheduler-redis(.*?)\n\n", readme, re.S
    )
    assert command, "deploy/README.md creates the Secret scheduler-redis"
    keys = set(re.findall(r"--from-literal=([a-z-]+)=", command.group(1)))
    assert keys == {"web", "beat", "worker", "keda", "keda-username"}


def test_the_login_throttle_trusts_the_one_ingress_in_front_of_web():
    """Users reach web through an ingress controller, which appends the client's address to
    X-Forwarded-For: the throttle counts per (user name, that address), so it must trust
    exactly that one proxy (0 would count every user as the ingress's address; 2 would let a
    client forge its own)."""
    assert _config()["LOGIN_TRUSTED_PROXIES"] == "1"
    web = _named("Deployment", "web")
    [container] = _containers(web, init=False)
    assert {"configMapRef": {"name": "scheduler-config"}} in container["envFrom"]
    assert all(item["name"] != "LOGIN_TRUSTED_PROXIES" for item in container.get("env", []))
    # The web Service is not exposed by itself: only the ingress in front reaches users.
    assert _named("Service", "web")["spec"].get("type", "ClusterIP") == "ClusterIP"


def test_every_app_process_exports_traces_to_the_jaeger_service_under_its_own_name():
    """Wired as compose is (test_compose.py): the endpoint is the Jaeger Service's OTLP/HTTP
    port, the sampler one the settings accept, and each long-running app container names
    its service.name, so the trace UI tells the web tier, the beats and each pool apart."""
    from tracing.setup import sampler_for

    config = _config()
    endpoint = urlsplit(config["OTEL_EXPORTER_OTLP_ENDPOINT"])
    service = _named("Service", endpoint.hostname)
    (otlp,) = [p for p in service["spec"]["ports"] if p["port"] == endpoint.port]
    (jaeger,) = [
        w
        for w in _workloads()
        if _selects(service["spec"]["selector"], _pod(w)["metadata"]["labels"])
    ]
    (container,) = _containers(jaeger)
    assert otlp["targetPort"] in {p["name"] for p in container["ports"]}
    sampler_for(config["OTEL_TRACES_SAMPLER"], float(config["OTEL_TRACES_SAMPLER_ARG"]))
    assert "{trace_id}" in config["OTEL_TRACE_UI_URL"]
    names = {}
    for workload in _app_workloads():
        if workload["kind"] != "Deployment":
            continue  # the migration job makes no spans
        (app,) = _containers(workload, init=False)
        env = {var["name"]: var.get("value") for var in app.get("env", [])}
        names[workload["metadata"]["name"]] = env["OTEL_SERVICE_NAME"]
    assert set(names) == {
        "web",
        "beat",
        "worker-critical",
        "worker-normal",
        "worker-bulk",
        "worker-egress",
    }
    assert len(set(names.values())) == len(names), names
    # Only the app pods may send to it (the default denies the rest).
    (policy,) = [
        p
        for p in _of_kind("NetworkPolicy")
        if p["spec"]["podSelector"] == {"matchLabels": {"app.kubernetes.io/component": "jaeger"}}
    ]
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": 4318, "protocol": "TCP"}]
    assert {tuple(peer["podSelector"]["matchLabels"].items()) for peer in rule["from"]} == {
        (("scheduler.io/data-client", "true"),),
        (("scheduler.io/egress-worker", "true"),),
    }
