"""Idle means idle, against the real control plane: a ready pool with nothing to do gets no write over several
resyncs. Counted twice: the resourceVersions of the pool and its children stay as they were, and the
operator's own client (its urllib3 request lines at DEBUG) sends no PATCH, POST, PUT or DELETE (a write
that changes nothing leaves no resourceVersion behind, but costs the API server all the same)."""

from __future__ import annotations

import re
import time

from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api, CustomObjectsApi

from fireflow_operator.api.model import GROUP, PLURAL, VERSION
from tests.support.pools import OperatorProcess, create_pool, create_secret, wait_for_condition, wait_until

RESYNCS = 4  # looks at the pool by its timer (every 5 s in the test operator)


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
    time.sleep(5)  # the first resync after Ready settles what the rollout left (observed generation, counts)
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
