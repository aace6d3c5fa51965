"""The operator's own Prometheus metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry()
RECONCILES = Counter("fireflow_operator_reconciles", "Pool reconciles by result.", ["result"], registry=REGISTRY)
RECONCILE_SECONDS = Histogram("fireflow_operator_reconcile_seconds", "Time of one reconcile.", registry=REGISTRY)
POOLS = Gauge("fireflow_operator_pools", "Pools by phase.", ["phase"], registry=REGISTRY)
RECOVERED_RUNS = Counter(
    "fireflow_operator_recovered_runs", "PENDING runs of departed workers handed back to the queue.", registry=REGISTRY
)
BUDGET_ALLOWED = Gauge(
    "fireflow_operator_pool_allowed_replicas",
    "Replicas the connection budget allows.",
    ["namespace", "pool"],
    registry=REGISTRY,
)
