"""Every pool's status as Prometheus series, for the alerts and the dashboard (docs/monitoring.md).

`pool_samples` is pure: a pool's status in, the samples of its series out. `PoolSeries` keeps the gauges
and drops a pool's series that its last reconcile no longer produced (a condition's old reason, a deleted
pool), so that no alert fires on a stale series.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import Gauge

from fireflow_operator.observability import metrics

# metric -> its label names after (namespace, pool)
Labels = tuple[str, ...]
Sample = tuple[Gauge, Labels, float]

CONDITION_VALUES = {"True": 1.0, "False": 0.0, "Unknown": -1.0}
# status key -> the `kind` label of fireflow_operator_pool_replicas
REPLICA_KEYS = {"desiredReplicas": "desired", "replicas": "current", "readyReplicas": "ready"}
# status.connectionBudget key -> the `kind` label of fireflow_operator_pool_connections
CONNECTION_KEYS = {"maxConnections": "max", "needed": "needed", "perReplica": "per_replica", "othersInUse": "others"}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def pool_samples(status: Mapping[str, Any]) -> list[Sample]:
    """The samples a pool's status gives, labels after (namespace, pool)."""
    samples: list[Sample] = []
    for cond in status.get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") and cond.get("status") in CONDITION_VALUES:
            labels = (str(cond["type"]), str(cond.get("reason") or ""))
            samples.append((metrics.POOL_CONDITION, labels, CONDITION_VALUES[str(cond["status"])]))
    for key, kind in REPLICA_KEYS.items():
        if (value := _number(status.get(key))) is not None:
            samples.append((metrics.POOL_REPLICAS, (kind,), value))
    budget = status.get("connectionBudget") or {}
    if (value := _number(budget.get("allowedReplicas"))) is not None:
        samples.append((metrics.POOL_REPLICAS, ("allowed",), value))
    for key, kind in CONNECTION_KEYS.items():
        if (value := _number(budget.get(key))) is not None:
            samples.append((metrics.POOL_CONNECTIONS, (kind,), value))
    for key, kind in (("schemaVersion", "current"), ("requiredSchemaVersion", "required")):
        if (value := _number(status.get(key))) is not None:
            samples.append((metrics.POOL_SCHEMA_VERSION, (kind,), value))
    if status.get("currentImage"):
        version = str(status.get("currentApplicationVersion") or "")
        samples.append((metrics.POOL_VERSION, (str(status["currentImage"]), version), 1.0))
    return samples


class PoolSeries:
    """The series of every pool, as its last reconcile left them."""

    def __init__(self) -> None:
        self._series: dict[tuple[str, str], set[tuple[Gauge, Labels]]] = {}

    def update(self, namespace: str, pool: str, status: Mapping[str, Any]) -> None:
        samples = pool_samples(status)
        now = {(gauge, labels) for gauge, labels, _ in samples}
        for gauge, labels in self._series.get((namespace, pool), set()) - now:
            gauge.remove(namespace, pool, *labels)
        for gauge, labels, value in samples:
            gauge.labels(namespace, pool, *labels).set(value)
        self._series[(namespace, pool)] = now

    def forget(self, namespace: str, pool: str) -> None:
        for gauge, labels in self._series.pop((namespace, pool), set()):
            gauge.remove(namespace, pool, *labels)
