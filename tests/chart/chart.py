"""Running helm on `charts/fireflow-operator`, and the value combinations every chart test goes through.

Every render pins the Kubernetes version of `tests/kube/versions.env`, the test cluster's: the helm built from
Go modules has v1.20.0 compiled in as its default, which says nothing of the cluster (the chart renders without
the flag too, `test_release.py`).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.kube.tools import BUILD_SCRIPT, REPO_ROOT, helm_path, kubectl_path, pins

Json = dict[str, Any]
CHART_DIR = REPO_ROOT / "charts" / "fireflow-operator"
CRD_FILE = REPO_ROOT / "crds" / "fireflow.persistent.ai_fireflowworkerpools.yaml"
CHART_CRD_FILE = CHART_DIR / "files" / CRD_FILE.name
KUBE_VERSION = pins()["KUBERNETES_VERSION"]
# Kinds whose CRDs the test cluster does not have: YAML-checked, not validated by the API server.
NO_SERVER_SCHEMA = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("keda.sh/v1alpha1", "ScaledObject"),
                    ("keda.sh/v1alpha1", "TriggerAuthentication"), ("monitoring.coreos.com/v1", "PodMonitor"),
                    ("monitoring.coreos.com/v1", "PrometheusRule")}  # fmt: skip

# (apiGroup, resource, verb): what the operator calls (operator/fireflow_operator/kube.py, reconcile.py,
# handlers.py) and what kopf does for it. Any change to the chart's rules must change this list too.
NAMESPACED_RULES: set[tuple[str, str, str]] = {
    *(("fireflow.persistent.ai", "fireflowworkerpools", v) for v in ("get", "list", "watch", "patch")),
    *(("fireflow.persistent.ai", "fireflowworkerpools/status", v) for v in ("get", "patch", "update")),
    ("fireflow.persistent.ai", "fireflowworkerpools/finalizers", "update"),
    *(("apps", "statefulsets", v) for v in ("get", "list", "watch", "create", "update", "patch", "delete")),
    *(("", "services", v) for v in ("get", "list", "watch", "create")),
    *(("policy", "poddisruptionbudgets", v) for v in ("get", "list", "watch", "create", "patch", "delete")),
    *(("batch", "jobs", v) for v in ("get", "list", "watch", "create", "delete")),
    *(("", "pods", v) for v in ("get", "list", "watch")),
    *(("networking.k8s.io", "networkpolicies", v) for v in ("get", "create", "update", "delete")),
    *(("", "secrets", v) for v in ("get", "create", "patch", "delete")),
    *(("", "events", v) for v in ("create", "patch", "list")),
    *(("events.k8s.io", "events", v) for v in ("create", "patch")),
}
# Cluster-wide mode only: kopf watches CRDs to notice its resources appear, change or go away.
CLUSTER_ONLY_RULES: set[tuple[str, str, str]] = {
    ("apiextensions.k8s.io", "customresourcedefinitions", v) for v in ("get", "list", "watch")
}


class HelmError(AssertionError):
    """helm exited non-zero; the message is its stderr."""


def missing_helm() -> str | None:
    """One line saying how to build helm when it is missing, else None."""
    path = helm_path()
    if path.is_file():
        return None
    return f"helm {pins()['HELM_VERSION']} is missing at {path}; build it with: {BUILD_SCRIPT.relative_to(REPO_ROOT)}"


def helm(*args: str, values: Json | None = None, tmp: Path | None = None) -> str:
    """Run helm; `values` go through a file (exactly what a user's `-f values.yaml` does)."""
    argv = [str(helm_path()), *args]
    if values is not None:
        assert tmp is not None, "values need a directory for their file"
        values_file = tmp / f"values-{len(list(tmp.glob('values-*.yaml')))}.yaml"
        values_file.write_text(yaml.safe_dump(values))
        argv += ["--values", str(values_file)]
    result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    if result.returncode != 0:
        raise HelmError(result.stderr.strip() or result.stdout.strip())
    return result.stdout


# What the pinned API server serves beyond helm's offline defaults (`helm install` discovers it; `helm
# template` is told, as Argo CD does with the cluster's list).
SERVED_APIS = ("admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",)


def template(
    tmp: Path,
    values: Json,
    *,
    release: str = "ff",
    namespace: str = "fireflow-system",
    show_only: str | None = None,
    api_versions: tuple[str, ...] = SERVED_APIS,
    skip_schema: bool = False,
) -> str:
    """`helm template`; `skip_schema` renders what values.schema.json would refuse (to see what it refuses)."""
    only = ["--show-only", show_only] if show_only else []
    apis = [arg for api in api_versions for arg in ("--api-versions", api)]
    skip = ["--skip-schema-validation"] if skip_schema else []
    return helm(
        "template", release, str(CHART_DIR), "--namespace", namespace, "--kube-version", KUBE_VERSION, *only,
        *apis, *skip, values=values, tmp=tmp,
    )  # fmt: skip


def render(
    tmp: Path,
    values: Json,
    *,
    release: str = "ff",
    namespace: str = "fireflow-system",
    api_versions: tuple[str, ...] = SERVED_APIS,
    skip_schema: bool = False,
) -> list[Json]:
    """Every object `helm template` renders, parsed."""
    text = template(
        tmp, values, release=release, namespace=namespace, api_versions=api_versions, skip_schema=skip_schema
    )
    return [doc for doc in yaml.safe_load_all(text) if doc]


def lint(tmp: Path, values: Json) -> str:
    return helm("lint", "--strict", "--kube-version", KUBE_VERSION, str(CHART_DIR), values=values, tmp=tmp)


def notes(tmp: Path, values: Json, *, kubeconfig: Path, release: str, namespace: str) -> str:
    """NOTES.txt as `helm install` prints it. `--dry-run=client` still asks the cluster for its version and
    checks ownership of existing objects: `--take-ownership` lets it render next to the CRD the test cluster
    applied from crds/ (nothing is written)."""
    output = helm(
        "install", release, str(CHART_DIR), "--namespace", namespace, "--dry-run=client", "--take-ownership",
        "--output", "json", "--kubeconfig", str(kubeconfig), values=values, tmp=tmp,
    )  # fmt: skip
    return str(json.loads(output)["info"]["notes"])


def by_kind(objects: list[Json], kind: str) -> list[Json]:
    return [obj for obj in objects if obj["kind"] == kind]


def one(objects: list[Json], kind: str) -> Json:
    found = by_kind(objects, kind)
    assert len(found) == 1, f"expected one {kind}, rendered {len(found)}"
    return found[0]


@dataclass(frozen=True)
class Scenario:
    """A meaningful combination of values. `namespaces` are the ones a test may watch (they exist in a
    cluster test; any names do for rendering)."""

    name: str
    build: Callable[[list[str]], Json]

    def values(self, namespaces: list[str]) -> Json:
        return self.build(namespaces)


CUSTOM_SETTINGS: Json = {
    "operator": {
        "logLevel": "DEBUG",
        "logFormat": "json",
        "resyncSeconds": 12.5,
        "databaseTimeoutSeconds": 9,
        "migrationRetrySeconds": 45,
        "healthPort": 9091,
        "extraEnv": [{"name": "TZ", "value": "UTC"}],
    },
    "metrics": {"port": 9090, "host": "0.0.0.0", "service": {"port": 9999}},
}

SCENARIOS = [
    Scenario("default", lambda ns: {}),
    Scenario("watch-one-namespace", lambda ns: {"watchNamespaces": ns[:1]}),
    Scenario("watch-two-namespaces", lambda ns: {"watchNamespaces": ns[:2]}),
    Scenario("no-crd", lambda ns: {"crds": {"create": False}}),
    Scenario(
        "service-monitor",
        lambda ns: {
            "metrics": {
                "serviceMonitor": {
                    "enabled": True,
                    "interval": "15s",
                    "scrapeTimeout": "10s",
                    "labels": {"release": "prometheus"},
                    "relabelings": [{"targetLabel": "team", "replacement": "fireflow"}],
                }
            },
            "monitoring": {
                "podMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
                "prometheusRule": {"enabled": True, "labels": {"release": "prometheus"}},
                "grafanaDashboard": {"enabled": True},
            },
        },
    ),
    Scenario("no-metrics", lambda ns: {"metrics": {"enabled": False}}),
    Scenario(
        "custom-image-resources-settings",
        lambda ns: {
            "image": {
                "repository": "registry.example.com/platform/fireflow-operator",
                "digest": "sha256:" + "ab" * 32,
                "pullPolicy": "Always",
            },
            "imagePullSecrets": [{"name": "regcred"}],
            "resources": {"requests": {"cpu": "250m", "memory": "300Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
            "podLabels": {"team": "platform"},
            "podAnnotations": {"example.com/owner": "platform"},
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ops", "effect": "NoSchedule"}],
            "priorityClassName": "system-cluster-critical",
            "serviceAccount": {"name": "fireflow-operator-sa", "annotations": {"example.com/role": "operator"}},
            **CUSTOM_SETTINGS,
        },
    ),
    Scenario(
        "external-service-account-and-rbac",
        lambda ns: {"serviceAccount": {"create": False, "name": "provided"}, "rbac": {"create": False}},
    ),
]
SCENARIO_IDS = [scenario.name for scenario in SCENARIOS]


def kubectl_apply(kubeconfig: Path, objects: list[Json], *, dry_run: bool = True) -> list[Json]:
    """Apply objects server-side with strict field validation; by default as a server dry-run, which is
    validation by the API server itself (schema, defaults, CEL rules, admission) with nothing stored. Kinds
    without a CRD in the test cluster (NO_SERVER_SCHEMA) must be filtered out by the caller. Returns the
    objects as the server stores (or would store) them."""
    unknown = [o["kind"] for o in objects if (o["apiVersion"], o["kind"]) in NO_SERVER_SCHEMA]
    assert not unknown, f"the test cluster has no schema for {unknown}"
    argv = [str(kubectl_path()), "--kubeconfig", str(kubeconfig), "apply", "--server-side", "--force-conflicts",
            "--field-manager=fireflow-chart-test", "--validate=strict", "-o", "json", "-f", "-"]  # fmt: skip
    if dry_run:
        argv.append("--dry-run=server")
    result = subprocess.run(
        argv, input=yaml.safe_dump_all(objects), capture_output=True, text=True, check=False, timeout=120
    )
    if result.returncode != 0:
        raise AssertionError(f"the API server refused the objects:\n{result.stderr.strip()}")
    output = json.loads(result.stdout)
    items: list[Json] = output["items"] if output.get("kind") == "List" else [output]
    return items


def server_checkable(objects: list[Json]) -> list[Json]:
    """The objects whose kinds the test cluster can validate (everything but NO_SERVER_SCHEMA)."""
    return [o for o in objects if (o["apiVersion"], o["kind"]) not in NO_SERVER_SCHEMA]
