"""The manifests in examples/: the database Secret, the minimal pool and the production-shaped pool with its
KEDA objects. The pools go through the operator's own model and through the API server (server-side
dry-run against the CRD); the KEDA objects have no CRD in the test cluster, so they are checked here as
YAML: references, the queue-depth query, timings."""

from __future__ import annotations

import pytest
import yaml

from fireflow_operator.api import names
from fireflow_operator.api.model import GROUP, KIND, VERSION, parse_spec
from tests.chart.chart import NO_SERVER_SCHEMA, Json, kubectl_apply, server_checkable
from tests.kube import images
from tests.kube.cluster import Cluster
from tests.kube.tools import REPO_ROOT

EXAMPLES = REPO_ROOT / "examples"
FILES = ["database-secret.yaml", "pool-minimal.yaml", "pool-production.yaml"]
POOL_API = f"{GROUP}/{VERSION}"


def _load(name: str) -> list[Json]:
    return [doc for doc in yaml.safe_load_all((EXAMPLES / name).read_text()) if doc]


def _all() -> list[Json]:
    return [obj for name in FILES for obj in _load(name)]


def _only(kind: str, name: str = "pool-production.yaml") -> Json:
    (found,) = [obj for obj in _load(name) if obj["kind"] == kind]
    return found


def test_should_ship_exactly_these_manifests() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.yaml")) == sorted(FILES)


@pytest.mark.parametrize("name", FILES)
def test_should_be_namespace_free_manifests_with_a_kind_and_a_name(name: str) -> None:
    for obj in _load(name):
        assert obj["apiVersion"] and obj["kind"] and obj["metadata"]["name"]
        assert "namespace" not in obj["metadata"], "applied with `kubectl -n <namespace> apply -f`"


def test_should_reference_the_example_secret_and_its_url_key_everywhere() -> None:
    secret = _only("Secret", "database-secret.yaml")
    assert secret["stringData"]["url"].startswith("postgresql://")
    pools = [obj for obj in _all() if obj["kind"] == KIND]
    assert len(pools) == 2
    for pool in pools:
        ref = parse_spec(pool["spec"]).database.secret_ref
        assert (ref.name, ref.key) == (secret["metadata"]["name"], "url")
    (target,) = _only("TriggerAuthentication")["spec"]["secretTargetRef"]
    assert target == {"parameter": "connection", "name": secret["metadata"]["name"], "key": "url"}


def test_should_run_the_worker_image_in_every_pool() -> None:
    for pool in (obj for obj in _all() if obj["kind"] == KIND):
        assert pool["apiVersion"] == POOL_API
        assert images.basename(pool["spec"]["image"]) == "fireflow-worker"


def test_should_shape_the_production_pool_for_disruptions_spread_and_resources() -> None:
    pool = _only(KIND)
    spec = parse_spec(pool["spec"])
    assert spec.replicas is None, "the ScaledObject owns the replica count"
    assert spec.pod_disruption_budget.enabled and spec.pod_disruption_budget.max_unavailable == 1
    assert spec.resources and spec.resources.requests and spec.resources.limits and spec.resources.limits["memory"]
    spread = spec.topology_spread_constraints or []
    assert {c["topologyKey"] for c in spread} == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}
    for constraint in spread:
        # The labels the operator puts on this pool's workers (and nothing that changes with a rollout).
        assert constraint["labelSelector"] == {"matchLabels": names.selector_labels(pool["metadata"]["name"])}
    annotations = spec.pod_annotations or {}
    assert annotations["prometheus.io/port"] == str(names.HEALTH_PORT)


def test_should_scale_the_production_pool_through_its_scale_subresource_on_queue_depth() -> None:
    pool, scaled = _only(KIND), _only("ScaledObject")
    assert ("keda.sh/v1alpha1", "ScaledObject") in NO_SERVER_SCHEMA
    assert scaled["spec"]["scaleTargetRef"] == {"apiVersion": POOL_API, "kind": KIND, "name": pool["metadata"]["name"]}
    spec = parse_spec(pool["spec"])
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "postgresql"
    assert trigger["authenticationRef"] == {"name": _only("TriggerAuthentication")["metadata"]["name"]}
    query = " ".join(trigger["metadata"]["query"].split())
    assert "FROM dbos.workflow_status" in query
    assert "queue_name = 'fireflow-executions'" in query
    assert "'ENQUEUED'" in query
    # The current version's runs only: older versions are sized by the operator, not by the autoscaler.
    assert f"application_version = '{spec.dbos.application_version}'" in query
    assert float(trigger["metadata"]["targetQueryValue"]) == spec.dbos.worker_concurrency
    assert 1 <= scaled["spec"]["minReplicaCount"] <= scaled["spec"]["maxReplicaCount"]
    # drain < grace period < the autoscaler's scale-down window: a leaving worker finishes before the next goes.
    window = scaled["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]
    assert spec.dbos.shutdown_drain_timeout_ms < spec.termination_grace_period_seconds * 1000
    assert spec.termination_grace_period_seconds < window["stabilizationWindowSeconds"]
    # The CRD has the /scale subresource the ScaledObject needs.
    crd = yaml.safe_load((REPO_ROOT / "crds" / "fireflow.persistent.ai_fireflowworkerpools.yaml").read_text())
    assert crd["spec"]["versions"][0]["subresources"]["scale"]["specReplicasPath"] == ".spec.replicas"


def test_should_be_accepted_by_the_api_server_except_the_keda_objects(
    kube_cluster: Cluster, kube_namespace: str
) -> None:
    objects = _all()
    for obj in objects:
        obj["metadata"]["namespace"] = kube_namespace
    checked = server_checkable(objects)
    assert {o["kind"] for o in objects} - {o["kind"] for o in checked} == {"ScaledObject", "TriggerAuthentication"}
    stored = kubectl_apply(kube_cluster.kubeconfig, checked)
    pools = {o["metadata"]["name"]: o for o in stored if o["kind"] == KIND}
    assert set(pools) == {"fireflow", "fireflow-production"}
    # The API server's defaults are the model's: the minimal pool comes back complete.
    minimal = pools["fireflow"]["spec"]
    assert (
        minimal["dbos"]["workerConcurrency"]
        == parse_spec(_only(KIND, "pool-minimal.yaml")["spec"]).dbos.worker_concurrency
    )
    assert minimal["queues"] == list(parse_spec(minimal).queues)
