"""Operator replicas electing a leader on a Lease, as the chart runs them, and the time one takes over from a
dead leader (tests/operator/test_leadership.py and benchmarks/bench_failover.py)."""

from __future__ import annotations

import re
import time

from kubernetes.client import ApiClient, CoordinationV1Api
from kubernetes.client.exceptions import ApiException

from tests.kube.cluster import Cluster
from tests.support.pools import OperatorProcess, wait_until

LEASE = "fireflow-operator"  # FIREFLOW_OPERATOR_LEASE_NAME's default
LEADING = "leading: holds Lease"
# kopf's line for a reconcile that a pool's event, its timer or a child's event started, and that finished.
RECONCILED = re.compile(r"(Handler|Timer) '(pool_changed|pool_resync|child_changed)' succeeded")


def replica(cluster: Cluster, namespace: str, name: str, **env: str) -> OperatorProcess:
    """One replica of an operator for `namespace`'s pools, a candidate for the Lease there."""
    return OperatorProcess(
        cluster,
        POD_NAME=name,
        FIREFLOW_OPERATOR_LEADER_ELECTION_NAMESPACE=namespace,
        FIREFLOW_OPERATOR_NAMESPACES=namespace,
        # As the chart passes them (strings from its values): the election library wants whole seconds.
        FIREFLOW_OPERATOR_LEASE_DURATION_SECONDS="10",
        FIREFLOW_OPERATOR_RENEW_DEADLINE_SECONDS="7",
        FIREFLOW_OPERATOR_RETRY_PERIOD_SECONDS="2",
        **env,
    ).start()


def holder(api: ApiClient, namespace: str) -> str | None:
    try:
        lease = CoordinationV1Api(api).read_namespaced_lease(LEASE, namespace)
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    return lease.spec.holder_identity if lease.spec else None


def take_over(
    api: ApiClient, namespace: str, standby: OperatorProcess, name: str, killed: float
) -> tuple[float, float]:
    """Seconds from the leader's death (`killed`, time.monotonic()) until `standby` holds the Lease, and until
    its first reconcile finished."""
    wait_until(f"{name} leads", lambda: holder(api, namespace) == name, timeout=60)
    leading = time.monotonic() - killed

    def reconciled() -> bool:
        output = standby.output()
        start = output.find(LEADING)
        return start >= 0 and RECONCILED.search(output, start) is not None

    wait_until(f"{name} reconciles", reconciled, timeout=60)
    return leading, time.monotonic() - killed
