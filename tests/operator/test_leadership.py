"""Two operator replicas on one Lease, against the real control plane: one leads, the other writes nothing but
stands by; the leader SIGKILLed mid-migration or mid versioned rollout, the other takes over and finishes it
with no Job or StatefulSet created twice, one new ControllerRevision per change and no promise broken. The time
to take over is printed (no test asserts a duration; benchmarks/bench_failover.py measures it)."""

from __future__ import annotations

import time
from collections import Counter

from kubernetes.client import ApiClient, AppsV1Api

from tests.operator.recorder import Recorder, violations
from tests.support.leadership import holder, replica, take_over
from tests.support.pools import (
    QUICK_DBOS,
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


def test_should_fail_over_to_the_standby_replica_mid_migration_with_nothing_done_twice(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, pool_database: str
) -> None:
    operator.stop()  # this test's two replicas watch the namespace instead
    first = replica(operator.cluster, kube_namespace, "operator-a")
    wait_until("operator-a leads", lambda: holder(kube_api, kube_namespace) == "operator-a")
    second = replica(operator.cluster, kube_namespace, "operator-b")
    try:
        create_secret(kube_api, kube_namespace, pool_database)
        recorder = Recorder(kube_api, kube_namespace, kinds=("Pod", "Job", "StatefulSet", "ControllerRevision"))
        create_pool(kube_api, kube_namespace, "pool", replicas=2,
                    migration={"strategy": "Online", "lockTimeoutMs": 2000, "retries": 10})  # fmt: skip
        wait_for_condition(kube_api, kube_namespace, "pool", "Ready")
        assert holder(kube_api, kube_namespace) == "operator-a"
        assert "leading" not in second.output() and "standing by" in second.output()
        set_schema_behind(pool_database)
        patch_pool(kube_api, kube_namespace, "pool", {"image": "fireflow-worker:2"})
        wait_until(
            "the migration under way",
            lambda: any(c.kind == "Job" and c.image.endswith(":2") for c in recorder.ordered()),
        )
        first.kill()
        leading, reconciling = take_over(kube_api, kube_namespace, second, "operator-b", time.monotonic())
        print(f"operator-b took the Lease {leading:.1f} s and reconciled {reconciling:.1f} s after the leader died")
        wait_for_pool(kube_api, kube_namespace, "pool", "the new version", rolled_out("fireflow-worker:2"))
        recorder.close()
        changes = recorder.ordered()
        created = Counter((c.kind, c.name) for c in changes if c.kind in ("Job", "StatefulSet") and c.type == "ADDED")
        assert created and max(created.values()) == 1, f"created twice: {created}"
        revisions = Counter(c.owner for c in changes if c.kind == "ControllerRevision" and c.type == "ADDED")
        assert revisions == {"pool": 2}, f"one ControllerRevision at creation, one for the new image: {revisions}"
        assert violations(changes, online=True) == []
    finally:
        first.kill()
        second.stop()
        print(first.output()[-5_000:], second.output()[-10_000:])


def _statefulsets(api: ApiClient, namespace: str) -> list[str]:
    return sorted(str(s.metadata.name) for s in AppsV1Api(api).list_namespaced_stateful_set(namespace).items)


def test_should_fail_over_to_the_standby_replica_mid_versioned_rollout_with_nothing_done_twice(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, pool_database: str
) -> None:
    operator.stop()
    first = replica(operator.cluster, kube_namespace, "operator-a")
    wait_until("operator-a leads", lambda: holder(kube_api, kube_namespace) == "operator-a")
    second = replica(operator.cluster, kube_namespace, "operator-b")
    try:
        create_secret(kube_api, kube_namespace, pool_database)
        recorder = Recorder(kube_api, kube_namespace, kinds=("Pod", "Job", "StatefulSet", "ControllerRevision"))
        create_pool(kube_api, kube_namespace, "pool", replicas=2, dbos={**QUICK_DBOS, "applicationVersion": "1"})
        wait_for_condition(kube_api, kube_namespace, "pool", "Ready")
        wait_until("operator-b stands by", lambda: "standing by" in second.output())
        before = {(c.kind, c.name) for c in list(recorder.changes)}
        patch_pool(
            kube_api, kube_namespace, "pool", {"image": "fireflow-worker:2", "dbos": {"applicationVersion": "2"}}
        )
        wait_until("the new version's StatefulSet", lambda: "pool-v2" in _statefulsets(kube_api, kube_namespace))
        first.kill()
        leading, reconciling = take_over(kube_api, kube_namespace, second, "operator-b", time.monotonic())
        print(f"operator-b took the Lease {leading:.1f} s and reconciled {reconciling:.1f} s after the leader died")
        wait_for_pool(kube_api, kube_namespace, "pool", "the new version", rolled_out("fireflow-worker:2"))
        wait_until("version 1 retired", lambda: _statefulsets(kube_api, kube_namespace) == ["pool-v2"], timeout=120)
        recorder.close()
        changes = recorder.ordered()
        added = [(c.kind, c.name) for c in changes if c.type == "ADDED" and (c.kind, c.name) not in before]
        made = Counter(key for key in added if key[0] in ("Job", "StatefulSet"))
        assert ("StatefulSet", "pool-v2") in made and max(made.values()) == 1, f"created twice: {made}"
        revisions = Counter(c.owner for c in changes if c.kind == "ControllerRevision" and ("ControllerRevision",
                            c.name) in added)  # fmt: skip
        assert revisions == {"pool-v2": 1}, f"one new ControllerRevision for one change: {revisions}"
        assert violations(changes) == []
    finally:
        first.kill()
        second.stop()
        print(first.output()[-5_000:], second.output()[-10_000:])


def test_should_hand_the_lease_over_at_once_on_a_clean_exit(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess
) -> None:
    operator.stop()
    first = replica(operator.cluster, kube_namespace, "operator-a")
    wait_until("operator-a leads", lambda: holder(kube_api, kube_namespace) == "operator-a")
    second = replica(operator.cluster, kube_namespace, "operator-b")
    try:
        wait_until("operator-b stands by", lambda: "standing by" in second.output())
        first.stop()  # SIGTERM: kopf exits, the Lease is handed over
        assert first.process is not None and first.process.returncode == 0, first.output()[-3_000:]
        assert holder(kube_api, kube_namespace) in (None, "operator-b")
        wait_until("operator-b leads", lambda: holder(kube_api, kube_namespace) == "operator-b", timeout=30)
    finally:
        second.stop()
