"""The operator's own Prometheus metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry()
RECONCILES = Counter("fireflow_operator_reconciles", "Pool reconciles by result.", ["result"], registry=REGISTRY)
RECONCILE_SECONDS = Histogram("fireflow_operator_reconcile_seconds", "Time of one reconcile.", registry=REGISTRY)
RECONCILE_REQUESTS = Counter(
    "fireflow_operator_reconcile_requests",
    "Reconciles asked for, by what asked: pool (its spec or metadata changed), child (a StatefulSet, Job, Pod, "
    "PodDisruptionBudget or Service of it changed), requeue (a reconcile asked to look again), timer (the resync).",
    ["trigger"],
    registry=REGISTRY,
)
RECONCILE_QUEUE = Gauge(
    "fireflow_operator_reconcile_queue", "Pools waiting for a reconcile (the most urgent go first).", registry=REGISTRY
)
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
# Every pool's status (pool_metrics.py): what the alerts and the dashboard read.
POOL_CONDITION = Gauge(
    "fireflow_operator_pool_condition",
    "A pool condition: 1 True, 0 False, -1 Unknown, labelled with its current reason.",
    ["namespace", "pool", "type", "reason"],
    registry=REGISTRY,
)
POOL_REPLICAS = Gauge(
    "fireflow_operator_pool_replicas",
    "A pool's workers: desired (asked for), allowed (by the connection budget), current, ready.",
    ["namespace", "pool", "kind"],
    registry=REGISTRY,
)
POOL_CONNECTIONS = Gauge(
    "fireflow_operator_pool_connections",
    "A pool's connection budget: max (the server's limit that binds), needed (the pool's workers and "
    "migration Job), per_replica, others (other clients' smoothed usage).",
    ["namespace", "pool", "kind"],
    registry=REGISTRY,
)
POOL_SCHEMA_VERSION = Gauge(
    "fireflow_operator_pool_schema_version",
    "The DBOS schema version of a pool's database: current, and required by its target image.",
    ["namespace", "pool", "kind"],
    registry=REGISTRY,
)
POOL_VERSION = Gauge(
    "fireflow_operator_pool_version_info",
    "1 for the image and application version a pool's workers run.",
    ["namespace", "pool", "image", "application_version"],
    registry=REGISTRY,
)
