"""The operator's log as a log pipeline reads it: with FIREFLOW_LOG_FORMAT=json every line of the real
operator reconciling a real pool - kopf's and the Kubernetes client's included - is one JSON object with a
level and a message, and the lines about the pool name it."""

from __future__ import annotations

from kubernetes.client import ApiClient

from tests.kube.cluster import Cluster
from tests.support.pools import OperatorProcess, create_pool, create_secret, wait_for_condition
from tests.worker.test_logs import json_lines

CHILD_HANDLERS = ("Handler 'statefulset_changed'", "Handler 'job_changed'", "Handler 'pod_changed'")


def test_should_write_every_operator_line_as_json_naming_the_pool(
    kube_cluster: Cluster, kube_api: ApiClient, kube_namespace: str, pool_database: str
) -> None:
    operator = OperatorProcess(kube_cluster, FIREFLOW_LOG_FORMAT="json").start()
    try:
        create_secret(kube_api, kube_namespace, pool_database)
        create_pool(kube_api, kube_namespace, "logged", replicas=1)
        wait_for_condition(kube_api, kube_namespace, "logged", "Ready")
    finally:
        operator.stop()
    lines = json_lines(operator.output())
    assert any(line["logger"].startswith("kopf") for line in lines)
    about_pool = [line for line in lines if line.get("pool") == "logged"]
    assert about_pool, lines
    assert all(line["namespace"] == kube_namespace for line in about_pool)
    # kopf's lines about the pool's children (its StatefulSet, pods, Job) name the pool beside the child.
    # (In this test's namespace: an earlier test's pool, its namespace still going away, may be handled too.)
    handled = [
        line for line in lines if line["message"].startswith(CHILD_HANDLERS) and line.get("namespace") == kube_namespace
    ]
    assert handled
    assert all(line.get("pool") == "logged" and "object" in line for line in handled), [
        line for line in handled if line.get("pool") != "logged" or "object" not in line
    ]
