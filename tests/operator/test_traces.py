"""The operator's reconciles as spans, received by a real OpenTelemetry Collector over OTLP/HTTP."""

from __future__ import annotations

from kubernetes.client import ApiClient

from tests.kube.cluster import Cluster
from tests.otlp import Collector
from tests.support.pools import OperatorProcess, create_pool, create_secret, wait_for_condition


def test_should_export_a_span_per_reconcile_naming_the_pool(
    kube_cluster: Cluster, kube_api: ApiClient, kube_namespace: str, pool_database: str, otlp_collector: Collector
) -> None:
    operator = OperatorProcess(
        kube_cluster, OTEL_EXPORTER_OTLP_ENDPOINT=otlp_collector.endpoint, OTEL_BSP_SCHEDULE_DELAY="100"
    ).start()
    try:
        create_secret(kube_api, kube_namespace, pool_database)
        create_pool(kube_api, kube_namespace, "traced", replicas=1)
        wait_for_condition(kube_api, kube_namespace, "traced", "Ready")
    finally:
        operator.stop()
    spans = [s for s in otlp_collector.wait_for(1) if s.attributes.get("fireflow.pool") == "traced"]
    assert spans, operator.output()[-5000:]
    assert {s.name for s in spans} == {"reconcile"}
    assert {s.service for s in spans} == {"fireflow-operator"}
    assert all(s.attributes["k8s.namespace.name"] == kube_namespace for s in spans)
    assert all(s.parent_span_id == "" for s in spans)  # each reconcile a trace of its own
