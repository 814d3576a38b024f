"""What the "worker pool saturated" runbook checks first: is autoscaling configured?

ALERTS_AUTOSCALING says how the worker tiers scale: `kubernetes` (an HPA or an operator the
operator runs; believed), `none`, `keda`, or `auto`. With `keda` and `auto` the answer is
looked up, not believed: KEDA's ScaledObjects in this pod's namespace, through the
Kubernetes API with the pod's service account (deploy/kubernetes/beat.yaml gives the beat a
role that may only read them). Outside a cluster `auto` means none, and `keda` says that it
cannot look. The look-up is one GET with a short timeout, made by the alert evaluator on its
own thread, never in a tick.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import requests
from django.conf import settings

AUTOSCALING_MODES = ("kubernetes", "keda", "none", "auto")
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
SCALED_OBJECTS_PATH = "/apis/keda.sh/v1alpha1/namespaces/{namespace}/scaledobjects"
LOOKUP_TIMEOUT_SECONDS = 3.0


@dataclass(frozen=True)
class Autoscaling:
    configured: bool | None  # None: could not be told
    detail: str


def _in_cluster(service_account_dir: Path) -> bool:
    return (
        bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
        and (service_account_dir / "token").is_file()
    )


def _scaled_objects(service_account_dir: Path) -> list[dict]:
    host = os.environ["KUBERNETES_SERVICE_HOST"]
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    namespace = (service_account_dir / "namespace").read_text().strip()
    token = (service_account_dir / "token").read_text().strip()
    host = f"[{host}]" if ":" in host else host
    response = requests.get(
        f"https://{host}:{port}{SCALED_OBJECTS_PATH.format(namespace=namespace)}",
        headers={"Authorization": f"Bearer {token}"},
        verify=str(service_account_dir / "ca.crt"),
        timeout=LOOKUP_TIMEOUT_SECONDS,
    )
    response.raise_for_status()
    return list(response.json().get("items") or [])


def _scales_tier(scaled_object: dict, tier: str) -> bool:
    target = (scaled_object.get("spec") or {}).get("scaleTargetRef") or {}
    return target.get("name") == f"worker-{tier}"


def keda_autoscaling(tier: str, *, service_account_dir: Path = SERVICE_ACCOUNT_DIR) -> Autoscaling:
    """Whether a KEDA ScaledObject scales the tier's Deployment (worker-<tier>)."""
    try:
        objects = _scaled_objects(service_account_dir)
    except (OSError, ValueError, requests.RequestException) as error:
        return Autoscaling(None, f"KEDA's ScaledObjects could not be read: {error}")
    for scaled in objects:
        if _scales_tier(scaled, tier):
            spec = scaled.get("spec") or {}
            bounds = f"{spec.get('minReplicaCount', 0)}-{spec.get('maxReplicaCount', 100)} replicas"
            return Autoscaling(
                True, f"KEDA ScaledObject {scaled['metadata']['name']} scales it ({bounds})"
            )
    return Autoscaling(False, f"no KEDA ScaledObject scales worker-{tier}")


def autoscaling_status(
    tier: str, *, service_account_dir: Path = SERVICE_ACCOUNT_DIR
) -> Autoscaling:
    mode = str(settings.ALERTS["AUTOSCALING"]).strip().lower()
    if mode == "none":
        return Autoscaling(False, "not configured (ALERTS_AUTOSCALING=none)")
    if mode == "kubernetes":
        return Autoscaling(True, "configured (ALERTS_AUTOSCALING=kubernetes), not verified")
    if _in_cluster(service_account_dir):
        return keda_autoscaling(tier, service_account_dir=service_account_dir)
    if mode == "keda":
        return Autoscaling(
            None, "ALERTS_AUTOSCALING=keda, but this process runs outside Kubernetes: unchecked"
        )
    return Autoscaling(False, "not configured (not running in Kubernetes)")
