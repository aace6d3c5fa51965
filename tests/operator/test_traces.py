"""The operator's reconciles as spans, and its log records, received by a real OpenTelemetry Collector over
OTLP/HTTP."""

from __future__ import annotations

from kubernetes.client import ApiClient

from tests.kube.cluster import Cluster
from tests.support.otlp import Collector
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


def test_should_export_the_operators_log_naming_the_pool_with_otlp_logs(
    kube_cluster: Cluster, kube_api: ApiClient, kube_namespace: str, pool_database: str, otlp_collector: Collector
) -> None:
    operator = OperatorProcess(
        kube_cluster,
        OTEL_EXPORTER_OTLP_ENDPOINT=otlp_collector.endpoint,
        OTEL_LOGS_EXPORTER="otlp",
        OTEL_BLRP_SCHEDULE_DELAY="100",
    ).start()
    try:
        create_secret(kube_api, kube_namespace, pool_database)
        create_pool(kube_api, kube_namespace, "logged", replicas=1)
        wait_for_condition(kube_api, kube_namespace, "logged", "Ready")
        records = otlp_collector.wait_for_logs(
            lambda found: any(r.attributes.get("fireflow.pool") == "logged" for r in found)
        )
    finally:
        operator.stop()
    about_pool = [r for r in records if r.attributes.get("fireflow.pool") == "logged"]
    assert {r.service for r in records} == {"fireflow-operator"}
    assert all(r.attributes["k8s.namespace.name"] == kube_namespace for r in about_pool)
    assert any(r.logger.startswith("kopf") for r in about_pool)  # kopf's lines about the pool
    assert any(r.body == "exporting the log over OTLP/HTTP too (OTEL_LOGS_EXPORTER=otlp)" for r in records)
