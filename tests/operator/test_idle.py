"""Idle means idle, against the real control plane: a ready pool with nothing to do gets no write over several
resyncs. Counted twice: the resourceVersions of the pool and its children stay as they were, and the
operator's own client (its urllib3 request lines at DEBUG) sends no PATCH, POST, PUT or DELETE (a write
that changes nothing leaves no resourceVersion behind, but costs the API server all the same)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api, CustomObjectsApi

from fireflow_operator.api.model import GROUP, PLURAL, VERSION
from tests.kube.audit import count
from tests.kube.cluster import Cluster, LocalCluster
from tests.kube.controlplane import OPERATOR_USER
from tests.support.pools import OperatorProcess, create_pool, create_secret, wait_for_condition, wait_until

RESYNCS = 4  # looks at the pool by its timer (every 5 s in the test operator)
# One resync of a ready pool reads its database URL's Secret, once: the operator never lists or watches Secrets.
# The pool and its children come from kopf's watches (pool_index.py, watch_cache.py). Before those, on
# 2026-12-04, it was 13 reads: the pool, its PodDisruptionBudget (404), the Secret 3x, its StatefulSets 3x, its
# Jobs listed 3x (once cluster-wide) and its Pods listed 2x.
READS_PER_RESYNC = 1


def _settled(api: ApiClient, namespace: str, operator: OperatorProcess) -> None:
    """Wait until a whole resync went by without changing the pool or its children: what the rollout left
    (latest version, rollout complete, counts) is written by the resyncs after Ready, later on a busy machine."""

    def one_quiet_resync() -> bool:
        before, seen = _versions(api, namespace), len(operator.output())
        wait_until("a resync", lambda: operator.output()[seen:].count("Timer 'pool_resync' succeeded") >= 1)
        return _versions(api, namespace) == before

    wait_until("a resync that changes nothing", one_quiet_resync)


def _versions(api: ApiClient, namespace: str) -> dict[str, str]:
    pool: dict[str, dict[str, str]] = CustomObjectsApi(api).get_namespaced_custom_object(  # type: ignore[assignment]
        GROUP, VERSION, namespace, PLURAL, "pool"
    )
    found = {"pool": pool["metadata"]["resourceVersion"]}
    for sts in AppsV1Api(api).list_namespaced_stateful_set(namespace).items:
        found[f"StatefulSet/{sts.metadata.name}"] = str(sts.metadata.resource_version)
    for service in CoreV1Api(api).list_namespaced_service(namespace).items:
        found[f"Service/{service.metadata.name}"] = str(service.metadata.resource_version)
    return found


WRITE = re.compile(r'"(PATCH|POST|PUT|DELETE) (\S+) HTTP/1.1"')


def test_should_write_nothing_for_a_ready_pool_with_nothing_to_do(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, pool_database: str
) -> None:
    operator.stop()
    operator = OperatorProcess(operator.cluster, FIREFLOW_OPERATOR_LOG_LEVEL="DEBUG").start()
    create_secret(kube_api, kube_namespace, pool_database)
    create_pool(kube_api, kube_namespace, "pool", replicas=1)
    wait_for_condition(kube_api, kube_namespace, "pool", "Ready")
    _settled(kube_api, kube_namespace, operator)
    before, seen = _versions(kube_api, kube_namespace), len(operator.output())
    try:  # a window of RESYNCS looks at the pool, however long a busy machine takes for them
        wait_until(
            f"{RESYNCS} resyncs", lambda: operator.output()[seen:].count("Timer 'pool_resync' succeeded") >= RESYNCS
        )
        window = operator.output()[seen:]
    finally:
        operator.stop()
    assert _versions(kube_api, kube_namespace) == before
    assert window.count('"GET ') >= RESYNCS, "the request lines are no longer logged: the count is blind"
    assert [m.group(1, 2) for m in WRITE.finditer(window)] == []


def test_should_send_no_write_and_few_reads_for_a_ready_pool_by_the_audit_log(
    kube_cluster: Cluster, kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, pool_database: str
) -> None:
    audit = kube_cluster.control_plane.audit if isinstance(kube_cluster, LocalCluster) else None
    if audit is None:
        pytest.skip("the audit log is the local control plane's (tests/kube/audit.py)")
    create_secret(kube_api, kube_namespace, pool_database)
    create_pool(kube_api, kube_namespace, "pool", replicas=1)
    wait_for_condition(kube_api, kube_namespace, "pool", "Ready")
    _settled(kube_api, kube_namespace, operator)
    seen, since = len(operator.output()), datetime.now(UTC)
    wait_until(f"{RESYNCS} resyncs", lambda: operator.output()[seen:].count("Timer 'pool_resync' succeeded") >= RESYNCS)
    # This pool's requests (and cluster-wide ones): an earlier test's namespace may still be going away, and the
    # operator still looks at what is left of it.
    everything = audit.requests(since, datetime.now(UTC), user=OPERATOR_USER)
    requests = [r for r in everything if r.namespace in ("", kube_namespace)]
    print(sorted(count(requests).items()))
    assert [(r.verb, r.resource, r.code) for r in requests if r.mutating] == []
    reads = [r for r in requests if r.verb in ("get", "list")]
    assert sum(r.resource == "secrets" for r in reads) >= RESYNCS, "no resync read its Secret: the count is blind"
    assert {(r.verb, r.resource) for r in reads} == {("get", "secrets")}, sorted(count(reads).items())
    assert len(reads) <= READS_PER_RESYNC * RESYNCS, sorted(count(reads).items())
