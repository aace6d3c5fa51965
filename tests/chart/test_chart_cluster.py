"""The chart against the pinned API server (tests/kube: the Go-built v1.37.2 control plane, or kind):
every rendered object of every value combination passes a server-side dry-run with strict field validation,
the RBAC grants the operator's ServiceAccount exactly what it needs (asked with SubjectAccessReviews), and
the sample NOTES.txt prints is accepted as it is; and `helm install --set replicaCount=2` runs two replicas that
elect one leader, the other writing nothing but the Lease (the API server's audit log says so).

The ServiceMonitor is the one kind not validated here: the test cluster has no Prometheus Operator CRDs
(test_chart_render.py checks its shape)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from kubernetes.client import AuthorizationV1Api, CoordinationV1Api, CoreV1Api, CustomObjectsApi, PolicyV1Api

from fireflow_operator.api.model import GROUP, PLURAL, VERSION
from tests.chart.chart import (
    CHART_DIR,
    CLUSTER_ONLY_RULES,
    NAMESPACED_RULES,
    NO_SERVER_SCHEMA,
    SCENARIO_IDS,
    SCENARIOS,
    Json,
    Scenario,
    by_kind,
    helm,
    kubectl_apply,
    notes,
    render,
    server_checkable,
)
from tests.kube import rawapi
from tests.kube.cluster import Cluster, LocalCluster
from tests.support.pools import condition, create_pool, pool_gone, wait_for_pool, wait_until

pytestmark = pytest.mark.usefixtures("helm_bin")

# What the operator must never be able to do, whatever the mode.
FORBIDDEN = [
    ("delete", "apps", "deployments"),
    ("list", "", "secrets"),
    ("watch", "", "secrets"),
    ("update", "", "secrets"),
    ("create", "", "pods"),
    ("delete", "", "pods"),
    ("get", "", "configmaps"),
    ("update", "apps", "deployments"),
    ("delete", "", "services"),
    ("create", "fireflow.persistent.ai", "fireflowworkerpools"),
    ("delete", "fireflow.persistent.ai", "fireflowworkerpools"),
    ("create", "rbac.authorization.k8s.io", "roles"),
    ("create", "", "serviceaccounts/token"),
    ("create", "coordination.k8s.io", "leases"),
    ("patch", "apps", "statefulsets/scale"),  # a Scale carries no labels for the admission policies to check
    ("list", "events.k8s.io", "events"),
]


def _release(namespace: str) -> str:
    return "r" + namespace[-6:]  # the namespace's random suffix: cluster-scoped names never collide


def _namespaces(request: pytest.FixtureRequest, scenario: Scenario, kube_namespace: str) -> list[str]:
    if "two" in scenario.name:
        return [kube_namespace, str(request.getfixturevalue("other_namespace"))]
    return [kube_namespace]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=SCENARIO_IDS)
def test_should_be_accepted_by_the_pinned_api_server_when_values_are(
    tmp_path: Path, kube_cluster: Cluster, kube_namespace: str, request: pytest.FixtureRequest, scenario: Scenario
) -> None:
    namespaces = _namespaces(request, scenario, kube_namespace)
    objects = render(tmp_path, scenario.values(namespaces), release=_release(kube_namespace), namespace=kube_namespace)
    checked = server_checkable(objects)
    skipped = [o for o in objects if o not in checked]
    assert all((o["apiVersion"], o["kind"]) in NO_SERVER_SCHEMA for o in skipped)
    stored = kubectl_apply(kube_cluster.kubeconfig, checked)
    assert sorted((o["kind"], o["metadata"]["name"]) for o in stored) == sorted(
        (o["kind"], o["metadata"]["name"]) for o in checked
    )
    # The server defaulted nothing away: the operator container is what the chart rendered.
    (deployment,) = by_kind(stored, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


def _allowed(cluster: Cluster, account: tuple[str, str], verb: str, group: str, resource: str, namespace: str) -> bool:
    account_namespace, name = account
    resource, _, subresource = resource.partition("/")
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{account_namespace}:{name}",
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{account_namespace}", "system:authenticated"],
            "resourceAttributes": {
                "namespace": namespace,
                "verb": verb,
                "group": group,
                "resource": resource,
                "subresource": subresource,
            },
        },
    }
    answer = rawapi.call(AuthorizationV1Api(cluster.api).create_subject_access_review, review)
    return bool(answer["status"].get("allowed"))


@pytest.fixture
def installed_rbac(
    tmp_path: Path, kube_cluster: Cluster, kube_namespace: str, request: pytest.FixtureRequest
) -> Iterator[tuple[list[str], tuple[str, str]]]:
    """The chart's ServiceAccount and RBAC, really applied, for the watched namespaces `request.param`
    names ("none", "one" or "two"); yields (watched namespaces, (account namespace, account name))."""
    watched = {
        "none": [],
        "one": [kube_namespace],
        "two": [kube_namespace, request.getfixturevalue("other_namespace")],
    }[request.param]
    objects = render(tmp_path, {"watchNamespaces": watched}, release=_release(kube_namespace), namespace=kube_namespace)
    rbac = [o for o in objects if o["kind"] in {"ServiceAccount", "Role", "RoleBinding", "ClusterRole",
                                                "ClusterRoleBinding"}]  # fmt: skip
    kubectl_apply(kube_cluster.kubeconfig, rbac, dry_run=False)
    try:
        (account,) = by_kind(rbac, "ServiceAccount")
        yield watched, (kube_namespace, account["metadata"]["name"])
    finally:
        for obj in rbac:
            if obj["kind"].startswith("Cluster"):
                kube_cluster.kubectl("delete", obj["kind"], obj["metadata"]["name"], "--ignore-not-found", check=False)


@pytest.mark.parametrize("installed_rbac", ["none", "one", "two"], indirect=True, ids=["cluster-wide", "one", "two"])
def test_should_grant_the_operator_exactly_what_it_needs_where_it_works(
    kube_cluster: Cluster, installed_rbac: tuple[list[str], tuple[str, str]]
) -> None:
    watched, account = installed_rbac
    for namespace in watched or ["default", "kube-public"]:
        for group, resource, verb in sorted(NAMESPACED_RULES):
            assert _allowed(kube_cluster, account, verb, group, resource, namespace), (
                f"{verb} {group}/{resource} in {namespace}"
            )
        for verb, group, resource in FORBIDDEN:
            # The leader Lease lives in the release namespace: creating it there is granted, nowhere else.
            lease_home = resource == "leases" and namespace == account[0]
            assert _allowed(kube_cluster, account, verb, group, resource, namespace) is lease_home, (
                f"{verb} {group}/{resource} in {namespace}"
            )
    cluster_wide = not watched
    # kopf's cluster-wide watches list the pools and their children across namespaces; CRDs are cluster-scoped.
    for group, resource, verb in [("fireflow.persistent.ai", "fireflowworkerpools", "watch"),
                                  ("apps", "statefulsets", "list"), ("", "pods", "watch"),
                                  *sorted(CLUSTER_ONLY_RULES)]:  # fmt: skip
        assert _allowed(kube_cluster, account, verb, group, resource, "") is cluster_wide, f"{verb} {resource} (all)"
    # Never any namespace lifecycle: kopf lists namespaces only to match patterns, which this operator never uses.
    assert not _allowed(kube_cluster, account, "list", "", "namespaces", "")
    if watched:
        for verb, group, resource in [("get", "fireflow.persistent.ai", "fireflowworkerpools"), ("get", "", "secrets")]:
            assert not _allowed(kube_cluster, account, verb, group, resource, "default"), "outside the watched ones"


def _sample(text: str) -> list[Json]:
    match = re.search(r"^kubectl apply -f - <<'EOF'\n(.*?)^EOF$", text, re.MULTILINE | re.DOTALL)
    assert match, f"NOTES.txt has no `kubectl apply -f - <<'EOF'` sample:\n{text}"
    return [doc for doc in yaml.safe_load_all(match.group(1)) if doc]


@pytest.mark.parametrize("mode", ["cluster-wide", "one-namespace", "no-crd"])
def test_should_print_a_sample_the_api_server_accepts_in_notes(
    tmp_path: Path, kube_cluster: Cluster, kube_namespace: str, request: pytest.FixtureRequest, mode: str
) -> None:
    release = _release(kube_namespace)
    watched = [str(request.getfixturevalue("other_namespace"))] if mode == "one-namespace" else []
    values: Json = {"watchNamespaces": watched, "crds": {"create": mode != "no-crd"}}
    text = notes(tmp_path, values, kubeconfig=kube_cluster.kubeconfig, release=release, namespace=kube_namespace)
    assert f"kubectl -n {kube_namespace} rollout status deployment/{release}-fireflow-operator" in text
    assert ("crds.create=false" in text) is (mode == "no-crd")
    sample = _sample(text)
    assert [o["kind"] for o in sample] == ["FireflowWorkerPool"]
    expected_namespace = watched[0] if watched else kube_namespace
    (pool,) = sample
    assert pool["metadata"]["namespace"] == expected_namespace
    assert pool["spec"]["database"]["secretRef"] == {"name": "fireflow-database", "key": "url"}
    # The Secret comes from the reader's environment: no URL, and so no password, is ever printed.
    assert not re.search(r"://[^\s/@]*@", text) and "postgresql://" not in text
    assert (
        f"kubectl -n {expected_namespace} create secret generic fireflow-database "
        '--from-literal=url="$FIREFLOW_DATABASE_URL"' in text
    )
    assert (
        f"kubectl -n {expected_namespace} label secret fireflow-database fireflow.persistent.ai/usable-by-pools=true"
        in text
    )
    stored = kubectl_apply(kube_cluster.kubeconfig, sample)
    chart = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    assert stored[0]["spec"]["image"] == f"fireflow-worker:{chart['appVersion']}"


def _operator_pods(cluster: Cluster, namespace: str, release: str) -> list[Json]:
    selector = f"app.kubernetes.io/instance={release},app.kubernetes.io/name=fireflow-operator"
    pods: list[Json] = rawapi.call(CoreV1Api(cluster.api).list_namespaced_pod, namespace,
                                   label_selector=selector)["items"]  # fmt: skip
    return pods


def _ready_without_restarts(pod: Json) -> bool:
    status = pod.get("status", {})
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", []))
    return ready and all(c.get("restartCount", 0) == 0 for c in status.get("containerStatuses", []))


def _lease_holder(cluster: Cluster, namespace: str, lease: str) -> str | None:
    found = rawapi.call(CoordinationV1Api(cluster.api).read_namespaced_lease, lease, namespace)
    return found["spec"].get("holderIdentity")  # type: ignore[no-any-return]


def _healthy_in_pdb(cluster: Cluster, namespace: str, name: str) -> Json | None:
    pdb: Json = rawapi.call(PolicyV1Api(cluster.api).read_namespaced_pod_disruption_budget, name, namespace)
    return pdb if pdb.get("status", {}).get("currentHealthy") == 2 else None


def test_should_run_two_replicas_with_one_leader_and_a_standby_that_writes_nothing_when_replica_count_is_2(
    kube_cluster: Cluster, kube_namespace: str
) -> None:
    release = _release(kube_namespace)
    fullname = f"{release}-fireflow-operator"
    kubeconfig = ["--kubeconfig", str(kube_cluster.kubeconfig), "--namespace", kube_namespace]
    since = datetime.now(UTC)
    # No other value: --take-ownership only adopts the CRD the test cluster applied from crds/.
    helm("install", release, str(CHART_DIR), *kubeconfig, "--take-ownership", "--set", "replicaCount=2")
    try:
        wait_until("two operator pods Ready", lambda: sum(
            map(_ready_without_restarts, _operator_pods(kube_cluster, kube_namespace, release))) == 2)  # fmt: skip
        names = sorted(p["metadata"]["name"] for p in _operator_pods(kube_cluster, kube_namespace, release))
        leader = wait_until("a leader", lambda: _lease_holder(kube_cluster, kube_namespace, f"{fullname}-leader"))
        assert leader in names
        (standby,) = set(names) - {leader}
        # Something for a leader to write: a pool whose Secret is missing gets a finalizer and a status.
        create_pool(kube_cluster.api, kube_namespace, "pool")
        wait_for_pool(kube_cluster.api, kube_namespace, "pool", "reported by the leader",
                      lambda p: condition(p, "Degraded").get("reason") == "SecretMissing")  # fmt: skip
        pdb = wait_until("the PDB counts both", lambda: _healthy_in_pdb(kube_cluster, kube_namespace, fullname))
        assert pdb["status"]["disruptionsAllowed"] == 1
        # Past the first liveness probes (after 10 s, then every 20 s): still both up, neither restarted.
        wait_until("a liveness probe of each", lambda: (datetime.now(UTC) - since).total_seconds() > 40)
        pods = _operator_pods(kube_cluster, kube_namespace, release)
        assert sorted(p["metadata"]["name"] for p in pods) == names and all(map(_ready_without_restarts, pods)), pods
        logs = {name: kube_cluster.logs(kube_namespace, name) for name in names}
        assert "leading: holds Lease" in logs[leader] and "leading" not in logs[standby], logs[standby][-3_000:]
        audit = kube_cluster.control_plane.audit if isinstance(kube_cluster, LocalCluster) else None
        if audit is not None:  # the local control plane's audit log: who sent which request
            requests = audit.requests(since, datetime.now(UTC))
            of_standby = [r for r in requests if r.pod == standby]
            # It writes nothing (a Lease's update is the one write it may make), and reads only the Lease and, for
            # its warm pool index, the pools.
            assert [(r.verb, r.resource) for r in of_standby if r.mutating and r.resource != "leases"] == []
            assert ("get", "leases") in {(r.verb, r.resource) for r in of_standby}, "the standby is not seen: blind"
            assert {r.resource for r in of_standby} <= {"leases", PLURAL}, sorted(
                {(r.verb, r.resource) for r in of_standby}
            )
            of_leader = {(r.verb, r.resource) for r in requests if r.pod == leader}
            assert ("patch", f"{PLURAL}/status") in of_leader, "the leader's writes are not seen: the check is blind"
    finally:
        CustomObjectsApi(kube_cluster.api).delete_collection_namespaced_custom_object(
            GROUP, VERSION, kube_namespace, PLURAL
        )
        wait_until("the pool let go", lambda: pool_gone(kube_cluster.api, kube_namespace))
        helm("uninstall", release, *kubeconfig, "--wait", "--timeout", "2m")
