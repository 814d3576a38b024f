"""deploy/kubernetes/postgres-cluster.yaml, the CloudNativePG Cluster: validated offline
against a schema of the operator's documented Cluster API (tests/deploy/schemas/
cnpg-cluster.json: the fields this manifest uses, with their types and enums) the way the API
server validates it with strict field validation (kubectl's default: an unknown field is an
error, not silently pruned), then what the schema cannot see: two instances with one required
synchronous standby, and every app container's DATABASE_URL taken from the operator's Secret
whose `uri` names the read-write Service.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
KUBE_DIR = ROOT / "deploy" / "kubernetes"
SCHEMA = ROOT / "tests" / "deploy" / "schemas" / "cnpg-cluster.json"
APP_IMAGE = "scheduler-app"


def _documents() -> list[dict]:
    kustomization = yaml.safe_load((KUBE_DIR / "kustomization.yaml").read_text())
    docs = []
    for name in kustomization["resources"]:
        docs += [d for d in yaml.safe_load_all((KUBE_DIR / name).read_text()) if d]
    return docs


DOCS = _documents()
(CLUSTER,) = [d for d in DOCS if d["kind"] == "Cluster"]


def _strict(schema: object) -> object:
    """The schema as the API server applies it under strict field validation: an object that
    lists its properties refuses any other (the CRD leaves that implicit: structural schemas
    prune unknown fields, and `kubectl apply` turns a pruned field into an error)."""
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _strict(value) for key, value in schema.items()}
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def _validator() -> jsonschema.Draft7Validator:
    schema = json.loads(SCHEMA.read_text())
    return jsonschema.Draft7Validator(_strict(schema))


def test_the_cluster_matches_cloudnative_pgs_cluster_api():
    assert CLUSTER["apiVersion"] == "postgresql.cnpg.io/v1"
    _validator().validate(CLUSTER)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("spec", "instances"), "two"),  # not an integer
        (("spec", "instances"), 0),  # below the CRD's minimum
        (("spec", "replicas"), 2),  # not a Cluster field (a Deployment habit)
        (("spec", "postgresql", "synchronous", "method"), "all"),  # not in the enum
        (("spec", "postgresql", "synchronous", "dataDurability"), "strict"),
        (("spec", "storage", "sizee"), "50Gi"),  # a typo inside a nested object
    ],
)
def test_a_wrong_field_is_refused(path, value):
    broken = copy.deepcopy(CLUSTER)
    target = broken
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    assert list(_validator().iter_errors(broken)), path


def test_a_missing_required_field_is_refused():
    broken = copy.deepcopy(CLUSTER)
    del broken["spec"]["postgresql"]["synchronous"]["number"]
    assert list(_validator().iter_errors(broken))


def test_a_primary_and_one_synchronous_standby_so_a_promotion_loses_nothing():
    spec = CLUSTER["spec"]
    assert spec["instances"] == 2
    synchronous = spec["postgresql"]["synchronous"]
    assert synchronous["number"] == 1
    # RPO zero: a commit waits for the standby rather than going on without it.
    assert synchronous["dataDurability"] == "required"
    assert spec["bootstrap"]["initdb"] == {"database": "scheduler", "owner": "scheduler"}
    assert spec["storage"]["size"]


def _app_containers() -> list[dict]:
    containers = []
    for doc in DOCS:
        if doc["kind"] not in ("Deployment", "StatefulSet", "Job"):
            continue
        pod = doc["spec"]["template"]["spec"]
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            if container["image"] == APP_IMAGE:
                containers.append(container)
    return containers


def test_every_app_container_connects_to_the_clusters_read_write_service():
    """The operator writes `<cluster>-app` with a `uri` naming `<cluster>-rw`, the Service
    that follows the primary; every container that opens the database (the init containers'
    `migrate --check` too) reads DATABASE_URL from it, so none is left on a fixed host."""
    name = CLUSTER["metadata"]["name"]
    containers = _app_containers()
    assert len(containers) >= 10
    for container in containers:
        (url,) = [v for v in container.get("env", []) if v["name"] == "DATABASE_URL"]
        assert url["valueFrom"]["secretKeyRef"] == {"name": f"{name}-app", "key": "uri"}
    # No single PostgreSQL is left beside the cluster for anything to reach by mistake.
    assert not [
        d for d in DOCS if d["kind"] == "StatefulSet" and "postgres" in d["metadata"]["name"]
    ]


def test_only_app_pods_instances_and_the_operator_reach_the_instances():
    name = CLUSTER["metadata"]["name"]
    labels = CLUSTER["spec"]["inheritedMetadata"]["labels"]
    policies = [d for d in DOCS if d["kind"] == "NetworkPolicy"]
    # The instances carry the label the app's PostgreSQL policy guards.
    (clients,) = [p for p in policies if p["metadata"]["name"] == "postgres-clients-only"]
    assert clients["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    (replication,) = [
        p
        for p in policies
        if p["spec"]["podSelector"] == {"matchLabels": {"cnpg.io/cluster": name}}
    ]
    peers = [peer for rule in replication["spec"]["ingress"] for peer in rule["from"]]
    assert peers == [
        {"podSelector": {"matchLabels": {"cnpg.io/cluster": name}}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "cnpg-system"}}},
    ]
