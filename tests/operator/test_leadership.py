"""Two operator replicas on one Lease, against the real control plane: one leads, the other writes nothing but
stands by; the leader SIGKILLed mid-migration, the other takes over and finishes the rollout with no Job
created twice and no promise broken. The time to take over is printed (no test asserts a duration)."""

from __future__ import annotations

import time
from collections import Counter

from kubernetes.client import ApiClient, CoordinationV1Api
from kubernetes.client.exceptions import ApiException

from tests.operator.recorder import Recorder, violations
from tests.support.pools import (
    OperatorProcess,
    create_pool,
    create_secret,
    patch_pool,
    rolled_out,
    set_schema_behind,
    wait_for_condition,
    wait_for_pool,
    wait_until,
)

LEASE = "fireflow-operator"


def _replica(operator: OperatorProcess, namespace: str, name: str) -> OperatorProcess:
    return OperatorProcess(
        operator.cluster,
        POD_NAME=name,
        FIREFLOW_OPERATOR_LEADER_ELECTION_NAMESPACE=namespace,
        FIREFLOW_OPERATOR_NAMESPACES=namespace,
        # As the chart passes them (strings from its values): the election library wants whole seconds.
        FIREFLOW_OPERATOR_LEASE_DURATION_SECONDS="10",
        FIREFLOW_OPERATOR_RENEW_DEADLINE_SECONDS="7",
        FIREFLOW_OPERATOR_RETRY_PERIOD_SECONDS="2",
    ).start()


def _holder(api: ApiClient, namespace: str) -> str | None:
    try:
        lease = CoordinationV1Api(api).read_namespaced_lease(LEASE, namespace)
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    return lease.spec.holder_identity if lease.spec else None


def test_should_fail_over_to_the_standby_replica_mid_migration_with_nothing_done_twice(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, pool_database: str
) -> None:
    operator.stop()  # this test's two replicas watch the namespace instead
    first = _replica(operator, kube_namespace, "operator-a")
    wait_until("operator-a leads", lambda: _holder(kube_api, kube_namespace) == "operator-a")
    second = _replica(operator, kube_namespace, "operator-b")
    try:
        create_secret(kube_api, kube_namespace, pool_database)
        recorder = Recorder(kube_api, kube_namespace)
        create_pool(kube_api, kube_namespace, "pool", replicas=2,
                    migration={"strategy": "Online", "lockTimeoutMs": 2000, "retries": 10})  # fmt: skip
        wait_for_condition(kube_api, kube_namespace, "pool", "Ready")
        assert _holder(kube_api, kube_namespace) == "operator-a"
        assert "leading" not in second.output() and "standing by" in second.output()
        set_schema_behind(pool_database)
        patch_pool(kube_api, kube_namespace, "pool", {"image": "fireflow-worker:2"})
        wait_until(
            "the migration under way",
            lambda: any(c.kind == "Job" and c.image.endswith(":2") for c in recorder.ordered()),
        )
        first.kill()
        killed = time.monotonic()
        wait_until("operator-b leads", lambda: _holder(kube_api, kube_namespace) == "operator-b", timeout=60)
        print(f"operator-b took over {time.monotonic() - killed:.1f} s after the leader was killed")
        wait_for_pool(kube_api, kube_namespace, "pool", "the new version", rolled_out("fireflow-worker:2"))
        recorder.close()
        changes = recorder.ordered()
        created = Counter(c.name for c in changes if c.kind == "Job" and c.type == "ADDED")
        assert created and max(created.values()) == 1, f"a Job was created twice: {created}"
        assert violations(changes, online=True) == []
    finally:
        first.kill()
        second.stop()
        print(first.output()[-5_000:], second.output()[-10_000:])


def test_should_hand_the_lease_over_at_once_on_a_clean_exit(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess
) -> None:
    operator.stop()
    first = _replica(operator, kube_namespace, "operator-a")
    wait_until("operator-a leads", lambda: _holder(kube_api, kube_namespace) == "operator-a")
    second = _replica(operator, kube_namespace, "operator-b")
    try:
        wait_until("operator-b stands by", lambda: "standing by" in second.output())
        first.stop()  # SIGTERM: kopf exits, the Lease is handed over
        assert first.process is not None and first.process.returncode == 0, first.output()[-3_000:]
        assert _holder(kube_api, kube_namespace) in (None, "operator-b")
        wait_until("operator-b leads", lambda: _holder(kube_api, kube_namespace) == "operator-b", timeout=30)
    finally:
        second.stop()
