"""Least privilege enforced by the API server: the chart's ServiceAccount, RBAC and ValidatingAdmissionPolicies
really installed on the pinned API server, then requests made as the operator's ServiceAccount
(impersonated). What the operator builds is admitted; a token Secret, another Secret, a privileged or
token-mounting pod, an object without the operator's labels or owner, or someone else's object is refused,
in both RBAC modes."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import (
    ApiClient,
    AppsV1Api,
    BatchV1Api,
    CoreV1Api,
    CustomObjectsApi,
    NetworkingV1Api,
    PolicyV1Api,
)
from kubernetes.client.exceptions import ApiException

from fireflow_operator.api.model import GROUP, PLURAL, VERSION, parse_spec
from fireflow_operator.api.names import LABEL_POOL
from fireflow_operator.children.builders import (
    Pool,
    build_headless_service,
    build_migration_job,
    build_network_policy,
    build_pdb,
    build_statefulset,
)
from fireflow_operator.children.connection import build_copy
from tests.chart.chart import SERVED_APIS, Json, by_kind, kubectl_apply, render
from tests.kube import rawapi
from tests.kube.cluster import Cluster
from tests.support.pools import OperatorProcess, create_secret, pool_body, wait_for_condition, wait_until

pytestmark = pytest.mark.usefixtures("helm_bin")
INSTALLED = {"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding",
             "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}  # fmt: skip
POLICY_READY_SECONDS = 60.0  # the API server loads a new policy within seconds


def _release(namespace: str) -> str:
    return "a" + namespace[-6:]


@pytest.fixture(params=["cluster-wide", "namespaced"])
def as_operator(
    request: pytest.FixtureRequest, tmp_path: Path, kube_cluster: Cluster, kube_namespace: str
) -> Iterator[ApiClient]:
    """An API client that is the chart's operator ServiceAccount (RBAC and the policies enforced)."""
    values: Json = {"watchNamespaces": [kube_namespace] if request.param == "namespaced" else []}
    objects = [o for o in render(tmp_path, values, release=_release(kube_namespace), namespace=kube_namespace)
               if o["kind"] in INSTALLED]  # fmt: skip
    assert len(by_kind(objects, "ValidatingAdmissionPolicyBinding")) == 2
    kubectl_apply(kube_cluster.kubeconfig, objects, dry_run=False)
    (account,) = by_kind(objects, "ServiceAccount")
    client = ApiClient(kube_cluster.api.configuration)
    client.set_default_header(
        "Impersonate-User", f"system:serviceaccount:{kube_namespace}:{account['metadata']['name']}"
    )
    try:
        yield client
    finally:
        client.close()
        for obj in objects:
            if obj["kind"].startswith(("Cluster", "Validating")):
                kube_cluster.kubectl("delete", obj["kind"], obj["metadata"]["name"], "--ignore-not-found", check=False)


@pytest.fixture
def pool(kube_api: ApiClient, kube_namespace: str) -> Pool:
    """A real pool (created by the admin), so that the children below have a real owner."""
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "FireflowWorkerPool", "metadata": {"name": "pool"},
            "spec": {"image": "fireflow-worker:1", "database": {"secretRef": {"name": "db"}}}}  # fmt: skip
    created: Any = CustomObjectsApi(kube_api).create_namespaced_custom_object(
        GROUP, VERSION, kube_namespace, PLURAL, body
    )
    return Pool("pool", kube_namespace, created["metadata"]["uid"], parse_spec(created["spec"]))


def _refusal(write: Callable[[], Any]) -> str | None:
    """None when the API server admitted the write, else its message."""
    try:
        write()
    except ApiException as err:
        assert err.status in (403, 422), err.body
        return str(json.loads(str(err.body))["message"])
    return None


def _statefulset(pool: Pool, change: Callable[[Json], None]) -> Json:
    body = build_statefulset(pool, image="fireflow-worker:1", application_version="1", replicas=1)
    change(body)
    return body


def _job(pool: Pool, change: Callable[[Json], None]) -> Json:
    body = build_migration_job(pool, mode="plan", image="fireflow-worker:1", target="t", round_=1, database_label="d")
    change(body)
    return body


def _pod_spec(body: Json) -> Json:
    spec: Json = body["spec"]["template"]["spec"]
    return spec


def _container_security(body: Json) -> Json:
    security: Json = _pod_spec(body)["containers"][0]["securityContext"]
    return security


def test_should_let_the_operator_write_only_what_it_builds(
    as_operator: ApiClient, kube_api: ApiClient, kube_namespace: str, pool: Pool
) -> None:
    ns = kube_namespace
    apps, batch, core = AppsV1Api(as_operator), BatchV1Api(as_operator), CoreV1Api(as_operator)
    networking = NetworkingV1Api(as_operator)

    def dry(create: Callable[..., Any], body: Json) -> Callable[[], Any]:
        return lambda: rawapi.call(create, ns, body, dry_run="All")

    def create_sts(body: Json) -> Callable[[], Any]:
        return dry(apps.create_namespaced_stateful_set, body)

    privileged = _statefulset(
        pool, lambda b: _container_security(b).update(privileged=True, allowPrivilegeEscalation=True)
    )
    deadline = time.monotonic() + POLICY_READY_SECONDS
    while "the fireflow operator" not in (_refusal(create_sts(privileged)) or ""):  # loaded by now, or never
        assert time.monotonic() < deadline, "the operator may create a privileged StatefulSet"
        time.sleep(0.5)

    # What the operator builds is admitted.
    statefulset = _statefulset(pool, lambda b: None)
    job = build_migration_job(pool, mode="plan", image="fireflow-worker:1", target="t", round_=1, database_label="d")
    copy = build_copy(pool, "postgresql://fireflow@db:5432/fireflow")
    admitted = {
        "StatefulSet": create_sts(statefulset),
        "Job": dry(batch.create_namespaced_job, job),
        "Service": dry(core.create_namespaced_service, build_headless_service(pool)),
        "PodDisruptionBudget": dry(PolicyV1Api(as_operator).create_namespaced_pod_disruption_budget, build_pdb(pool)),
        "connection Secret": dry(core.create_namespaced_secret, copy),
        "NetworkPolicy": dry(networking.create_namespaced_network_policy, build_network_policy(pool)),
    }
    assert {what: _refusal(write) for what, write in admitted.items()} == dict.fromkeys(admitted)

    # Anything else is refused, with the policy's message.
    minted = {"kubernetes.io/service-account.name": "default"}
    token = {
        **copy,
        "type": "kubernetes.io/service-account-token",
        "metadata": {**copy["metadata"], "annotations": minted},
    }
    other_secret = {**copy, "metadata": {**copy["metadata"], "name": "someone-elses"}}
    # Without the operator's managed-by label but with the pool's: only the policy of managed objects refuses it
    # (with no pool label the pod policy would refuse it too, in either order).
    pool_only = {LABEL_POOL: job["metadata"]["labels"][LABEL_POOL], "app": "mine"}
    unlabelled_job = {**job, "metadata": {**job["metadata"], "labels": pool_only}}
    orphan_service = build_headless_service(pool)
    orphan_service["metadata"]["ownerReferences"] = []
    everyone = build_network_policy(pool)
    everyone["spec"]["podSelector"] = {}
    payments = {"matchLabels": {"app": "payments"}}

    def service(change: Json) -> Callable[[], Any]:
        body = build_headless_service(pool)
        body["spec"].update(change)
        return dry(core.create_namespaced_service, body)

    def other_pods(body: Json) -> None:  # a selector over someone else's pods (the template must match it)
        body["spec"]["selector"] = payments
        body["spec"]["template"]["metadata"]["labels"].update(payments["matchLabels"])

    def unlabelled_pods(body: Json) -> None:
        body["spec"]["template"]["metadata"]["labels"] = dict(body["spec"]["selector"]["matchLabels"])

    def claim(body: Json) -> None:
        body["spec"]["volumeClaimTemplates"] = [{"metadata": {"name": "data"}, "spec": {
            "accessModes": ["ReadWriteOnce"], "volumeName": "someone-elses", "resources": {"requests": {
                "storage": "1Gi"}}}}]  # fmt: skip

    def own_selector(body: Json) -> None:
        body["spec"]["manualSelector"] = True
        body["spec"]["selector"] = payments
        body["spec"]["template"]["metadata"]["labels"].update(payments["matchLabels"])

    other_pdb = build_pdb(pool)
    other_pdb["spec"]["selector"] = payments

    def pod_security(**fields: Any) -> Callable[[], Any]:  # the pod's own security context
        return create_sts(_statefulset(pool, lambda b: _pod_spec(b)["securityContext"].update(fields)))

    unlabelled_sts = _statefulset(pool, lambda b: b["metadata"].update(labels=pool_only))
    refused = {
        "a NetworkPolicy over other pods": (dry(networking.create_namespaced_network_policy, everyone),
                                            "may select only the pods of their own pool"),
        "a service-account token Secret": (dry(core.create_namespaced_secret, token),
                                           "may only write Opaque Secrets named <pool>-connection"),
        "another Secret": (dry(core.create_namespaced_secret, other_secret),
                           "may only write Opaque Secrets named <pool>-connection"),
        "a privileged pod": (create_sts(privileged), "containers must run restricted"),
        "a pod keeping every capability": (
            create_sts(_statefulset(pool, lambda b: _container_security(b).update(capabilities={}))),
            "containers must run restricted"),
        "a pod with a token": (
            create_sts(_statefulset(pool, lambda b: _pod_spec(b).update(automountServiceAccountToken=True))),
            "may not mount a service-account token"),
        "a pod as another ServiceAccount": (
            create_sts(_statefulset(pool, lambda b: _pod_spec(b).update(serviceAccountName="deployer"))),
            "may only run as the namespace's default ServiceAccount"),
        "a pod with the node's filesystem": (
            create_sts(_statefulset(pool, lambda b: _pod_spec(b)["volumes"].append(
                {"name": "root", "hostPath": {"path": "/"}}))),
            "may only have emptyDir volumes"),
        "a pod on the node's network": (
            create_sts(_statefulset(pool, lambda b: _pod_spec(b).update(hostNetwork=True))),
            "may not share the node's namespaces"),
        "an unconfined AppArmor pod": (
            create_sts(_statefulset(pool, lambda b: b["spec"]["template"]["metadata"]["annotations"].update(
                {"container.apparmor.security.beta.kubernetes.io/worker": "unconfined"}))),
            "may not carry AppArmor or seccomp annotations"),
        "a Job without the operator's labels": (dry(batch.create_namespaced_job, unlabelled_job),
                                                "may only write objects it manages"),
        "a Service no pool owns": (dry(core.create_namespaced_service, orphan_service),
                                   "must be controlled by the FireflowWorkerPool"),
        "a StatefulSet without the operator's labels": (create_sts(unlabelled_sts),
                                                        "may only write objects it manages"),
        "a StatefulSet over other pods": (create_sts(_statefulset(pool, other_pods)),
                                          "StatefulSets may select only their own pool's workers"),
        "pods without the pool's labels": (create_sts(_statefulset(pool, unlabelled_pods)),
                                           "pods must carry its labels"),
        "a StatefulSet claiming a volume": (create_sts(_statefulset(pool, claim)), "may not claim volumes"),
        "a privileged Job pod": (
            dry(batch.create_namespaced_job, _job(pool, lambda b: _container_security(b).update(
                privileged=True, allowPrivilegeEscalation=True))),
            "containers must run restricted"),
        "a Job pod with a token": (
            dry(batch.create_namespaced_job,
                _job(pool, lambda b: _pod_spec(b).update(automountServiceAccountToken=True))),
            "may not mount a service-account token"),
        "a Job choosing its own selector": (dry(batch.create_namespaced_job, _job(pool, own_selector)),
                                            "may not choose their own selector"),
        "a PDB over other pods": (dry(PolicyV1Api(as_operator).create_namespaced_pod_disruption_budget, other_pdb),
                                  "PodDisruptionBudgets may select only their own pool's workers"),
        "a LoadBalancer Service": (service({"type": "LoadBalancer", "clusterIP": ""}), "Services must be headless"),
        "a NodePort Service": (service({"type": "NodePort", "clusterIP": ""}), "Services must be headless"),
        "a Service with external IPs": (service({"clusterIP": "", "externalIPs": ["203.0.113.7"]}),
                                        "Services must be headless"),
        "a Service over other pods": (service({"selector": payments["matchLabels"]}), "Services must be headless"),
        "a pod with a host port": (
            create_sts(_statefulset(pool, lambda b: _pod_spec(b)["containers"][0]["ports"][0].update(hostPort=8080))),
            "may not use host ports"),
        "a pod probing another host": (
            create_sts(_statefulset(pool, lambda b: _pod_spec(b)["containers"][0]["livenessProbe"]["httpGet"].update(
                host="169.254.169.254"))),
            "probes of another host"),
        "a pod with sysctls": (pod_security(sysctls=[{"name": "kernel.msgmax", "value": "65536"}]),
                               "may not set sysctls"),
        "an SELinux pod": (pod_security(seLinuxOptions={"type": "spc_t"}), "may not set sysctls, SELinux"),
        "a pod as uid 0": (pod_security(runAsUser=0), "uid 0"),
        "an Unconfined seccomp pod": (pod_security(seccompProfile={"type": "Unconfined"}),
                                      "or an Unconfined seccomp or AppArmor profile"),
        "an Unconfined seccomp container": (
            create_sts(_statefulset(pool, lambda b: _container_security(b).update(
                seccompProfile={"type": "Unconfined"}))),
            "containers must run restricted"),
        "a container as uid 0": (create_sts(_statefulset(pool, lambda b: _container_security(b).update(runAsUser=0))),
                                 "containers must run restricted"),
        "a container adding SYS_ADMIN": (
            create_sts(_statefulset(pool, lambda b: _container_security(b).update(
                capabilities={"drop": ["ALL"], "add": ["SYS_ADMIN"]}))),
            "containers must run restricted"),
    }  # fmt: skip
    messages = {what: _refusal(write) for what, (write, _) in refused.items()}
    for what, (_, expected) in refused.items():
        assert messages[what] is not None and expected in messages[what], (what, messages[what])

    # Someone else's objects: neither changed, taken over nor deleted.
    theirs = _statefulset(pool, lambda b: None)
    # With the pool's label but not the operator's (as pool_only above): only the policy of managed objects
    # refuses writing it, so the message is that policy's.
    theirs["metadata"] = {"name": "theirs", "labels": {**pool_only, "app": "theirs"}}
    rawapi.call(AppsV1Api(kube_api).create_namespaced_stateful_set, ns, theirs)
    takeover = {"metadata": {"labels": statefulset["metadata"]["labels"]}}
    message = _refusal(lambda: apps.patch_namespaced_stateful_set("theirs", ns, takeover))
    assert message is not None and "may not take over an object it did not create" in message
    message = _refusal(lambda: apps.delete_namespaced_stateful_set("theirs", ns))
    assert message is not None and "may only write objects it manages" in message
    message = _refusal(lambda: apps.patch_namespaced_stateful_set("theirs", ns, {"spec": {"replicas": 0}}))
    assert message is not None and "may only write objects it manages" in message  # scaled only through itself
    secret: Any = {"metadata": {"name": "theirs"}, "stringData": {"password": "theirs"}}
    rawapi.call(CoreV1Api(kube_api).create_namespaced_secret, ns, secret)
    message = _refusal(lambda: core.patch_namespaced_secret("theirs", ns, {"stringData": {"password": "mine"}}))
    assert message is not None and "may only write objects it manages" in message
    relabel = {
        "metadata": {"labels": copy["metadata"]["labels"], "ownerReferences": copy["metadata"]["ownerReferences"]}
    }
    message = _refusal(lambda: core.patch_namespaced_secret("theirs", ns, relabel))
    assert message is not None and "may not take over an object it did not create" in message
    message = _refusal(lambda: core.delete_namespaced_secret("theirs", ns))
    assert message is not None and "may only write objects it manages" in message


def test_should_not_let_the_operator_create_pods_list_secrets_or_scale(
    as_operator: ApiClient, kube_namespace: str
) -> None:
    """RBAC alone: no pods, no Secret listing, and no /scale of a StatefulSet (its Scale carries no labels for
    the policies to check: the operator scales its own through the StatefulSet)."""
    core = CoreV1Api(as_operator)
    pod: Any = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    apps, scale = AppsV1Api(as_operator), {"spec": {"replicas": 0}}
    for write in (lambda: core.create_namespaced_pod(kube_namespace, pod, dry_run="All"),
                  lambda: core.list_namespaced_secret(kube_namespace),
                  lambda: apps.patch_namespaced_stateful_set_scale("any", kube_namespace, scale)):  # fmt: skip
        with pytest.raises(ApiException) as refused:
            write()
        assert refused.value.status == 403


def test_should_render_no_policy_where_the_api_server_has_none(tmp_path: Path) -> None:
    assert SERVED_APIS == ("admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",)
    kinds = {o["kind"] for o in render(tmp_path, {}, api_versions=())}
    assert "ValidatingAdmissionPolicy" not in kinds and "Deployment" in kinds
    kinds = {o["kind"] for o in render(tmp_path, {"admissionPolicy": {"create": False}})}
    assert not kinds & {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}


# Its peers are the API server's to check; no CNI here enforces it (kind's e2e has none either).
NETWORK: Json = {"networkPolicy": {"enabled": True, "metricsFrom": [{"namespaceSelector": {"matchLabels": {
    "kubernetes.io/metadata.name": "monitoring"}}}]}}  # fmt: skip


def _kubeconfig_as(cluster: Cluster, path: Path, token: str) -> Path:
    """The admin's kubeconfig with the admin's credentials replaced by a ServiceAccount's token."""
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    for user in config["users"]:
        user["user"] = {"token": token}
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize("mode", ["cluster-wide", "namespaced"])
def test_should_run_a_pool_as_its_own_service_account_under_the_policies_in_a_restricted_namespace(
    tmp_path: Path, kube_cluster: Cluster, kube_api: ApiClient, kube_namespace: str, database_url: str, mode: str
) -> None:
    """The chart's RBAC and policies are enough for the real operator: a pool starts (plan and apply Jobs,
    StatefulSet, Service, PDB, connection Secret) and is deleted (scaled down, runs handed back, copy released)
    where pods must be restricted."""
    ns = kube_namespace
    enforce = {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
    }
    CoreV1Api(kube_api).patch_namespace(ns, {"metadata": {"labels": enforce}})
    values: Json = {"watchNamespaces": [ns] if mode == "namespaced" else []}
    objects = [o for o in render(tmp_path, values, release=_release(ns), namespace=ns) if o["kind"] in INSTALLED]
    kubectl_apply(kube_cluster.kubeconfig, objects, dry_run=False)
    (account,) = by_kind(objects, "ServiceAccount")
    token = rawapi.call(CoreV1Api(kube_api).create_namespaced_service_account_token, account["metadata"]["name"], ns,
                        {"spec": {"expirationSeconds": 3600}})  # fmt: skip
    kubeconfig = _kubeconfig_as(kube_cluster, tmp_path / "operator.kubeconfig", token["status"]["token"])
    env = {"KUBECONFIG": str(kubeconfig), **({"FIREFLOW_OPERATOR_NAMESPACES": ns} if mode == "namespaced" else {})}
    operator = OperatorProcess(kube_cluster, **env).start()
    try:
        create_secret(kube_api, ns, database_url)
        body = pool_body("pool", replicas=2, **NETWORK)
        CustomObjectsApi(kube_api).create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
        pool = wait_for_condition(kube_api, ns, "pool", "Ready")
        assert pool["status"]["readyReplicas"] == 2
        policy = NetworkingV1Api(kube_api).read_namespaced_network_policy("pool", ns)
        assert policy.spec.pod_selector.match_labels == {"fireflow.persistent.ai/pool": "pool"}
        assert [p.port for rule in policy.spec.egress for p in rule.ports] == [53, 53, 5432]
        assert PolicyV1Api(kube_api).read_namespaced_pod_disruption_budget("pool", ns).spec.max_unavailable == 1
        assert CoreV1Api(kube_api).read_namespaced_secret("pool-connection", ns).type == "Opaque"
        CustomObjectsApi(kube_api).delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "pool")
        wait_until("the pool gone", lambda: _gone(kube_api, ns))
        # An earlier test's namespace may still be terminating, and a cluster-wide operator finishes its pool's
        # deletion: its events there are refused for that reason, not for the operator's RBAC.
        refused = [line for line in operator.output().splitlines()
                   if "forbidden" in line.lower() and "NamespaceTerminating" not in line]  # fmt: skip
        assert not refused, refused[:3]
    finally:
        operator.stop()
        print(operator.output()[-20_000:])
        for obj in objects:
            if obj["kind"].startswith(("Cluster", "Validating")):
                kube_cluster.kubectl("delete", obj["kind"], obj["metadata"]["name"], "--ignore-not-found", check=False)


def _gone(api: ApiClient, namespace: str) -> bool:
    pools: Any = CustomObjectsApi(api).list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
    return not pools["items"]
