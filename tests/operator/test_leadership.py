"""Two operator replicas on one Lease, against the real control plane: one leads, the other writes nothing but
stands by; the leader SIGKILLed mid-migration or mid versioned rollout, the other takes over and finishes it
with no Job or StatefulSet created twice, one new ControllerRevision per change and no promise broken. The time
to take over is printed (no test asserts a duration; benchmarks/bench_failover.py measures it)."""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Iterator

from kubernetes.client import ApiClient, AppsV1Api

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
from tests.support.recorder import Change, Recorder, violations

ALL_KINDS = ("Pod", "Job", "StatefulSet", "ControllerRevision")


@contextlib.contextmanager
def _two_replicas(operator: OperatorProcess, namespace: str) -> Iterator[tuple[OperatorProcess, OperatorProcess]]:
    """operator-a leading and operator-b standing by for `namespace`'s pools (instead of `operator`)."""
    operator.stop()  # this test's two replicas watch the namespace instead
    first = replica(operator.cluster, namespace, "operator-a")
    wait_until("operator-a leads", lambda: holder(operator.cluster.api, namespace) == "operator-a")
    second = replica(operator.cluster, namespace, "operator-b")
    try:
        wait_until("operator-b stands by", lambda: "standing by" in second.output())
        yield first, second
    finally:
        first.kill()
        second.stop()
        print(first.output()[-5_000:], second.output()[-10_000:])


@contextlib.contextmanager
def _recorded_failover(
    operator: OperatorProcess, namespace: str, database: str
) -> Iterator[tuple[OperatorProcess, OperatorProcess, Recorder]]:
    """Two replicas, the pools' Secret, and every Pod, Job, StatefulSet and ControllerRevision on record."""
    with _two_replicas(operator, namespace) as (first, second):
        create_secret(operator.cluster.api, namespace, database)
        yield first, second, Recorder(operator.cluster.api, namespace, kinds=ALL_KINDS)


def _kill_the_leader(api: ApiClient, namespace: str, first: OperatorProcess, second: OperatorProcess) -> None:
    first.kill()
    leading, reconciling = take_over(api, namespace, second, "operator-b", time.monotonic())
    print(f"operator-b took the Lease {leading:.1f} s and reconciled {reconciling:.1f} s after the leader died")


def _new_revisions(changes: list[Change], before: set[tuple[str, str]]) -> Counter[str]:
    """The ControllerRevisions made since `before`, per StatefulSet, once no Job or StatefulSet was made twice."""
    added = [(c.kind, c.name, c.owner) for c in changes if c.type == "ADDED" and (c.kind, c.name) not in before]
    made = Counter((kind, name) for kind, name, _ in added if kind in ("Job", "StatefulSet"))
    assert made and max(made.values()) == 1, f"created twice: {made}"
    return Counter(owner for kind, _, owner in added if kind == "ControllerRevision")


def test_should_fail_over_to_the_standby_replica_mid_migration_with_nothing_done_twice(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, pool_database: str
) -> None:
    with _recorded_failover(operator, kube_namespace, pool_database) as (first, second, recorder):
        create_pool(kube_api, kube_namespace, "pool", replicas=2,
                    migration={"strategy": "Online", "lockTimeoutMs": 2000, "retries": 10})  # fmt: skip
        wait_for_condition(kube_api, kube_namespace, "pool", "Ready")
        assert holder(kube_api, kube_namespace) == "operator-a" and "leading" not in second.output()
        set_schema_behind(pool_database)
        patch_pool(kube_api, kube_namespace, "pool", {"image": "fireflow-worker:2"})
        wait_until(
            "the migration under way",
            lambda: any(c.kind == "Job" and c.image.endswith(":2") for c in recorder.ordered()),
        )
        _kill_the_leader(kube_api, kube_namespace, first, second)
        wait_for_pool(kube_api, kube_namespace, "pool", "the new version", rolled_out("fireflow-worker:2"))
        recorder.close()
        changes = recorder.ordered()
        revisions = _new_revisions(changes, set())
        assert revisions == {"pool": 2}, f"one ControllerRevision at creation, one for the new image: {revisions}"
        assert violations(changes, online=True) == []


def _statefulsets(api: ApiClient, namespace: str) -> list[str]:
    return sorted(str(s.metadata.name) for s in AppsV1Api(api).list_namespaced_stateful_set(namespace).items)


def test_should_fail_over_to_the_standby_replica_mid_versioned_rollout_with_nothing_done_twice(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, pool_database: str
) -> None:
    with _recorded_failover(operator, kube_namespace, pool_database) as (first, second, recorder):
        create_pool(kube_api, kube_namespace, "pool", replicas=2, dbos={**QUICK_DBOS, "applicationVersion": "1"})
        wait_for_condition(kube_api, kube_namespace, "pool", "Ready")
        before = {(c.kind, c.name) for c in list(recorder.changes)}
        change = {"image": "fireflow-worker:2", "dbos": {"applicationVersion": "2"}}
        patch_pool(kube_api, kube_namespace, "pool", change)
        wait_until("the new version's StatefulSet", lambda: "pool-v2" in _statefulsets(kube_api, kube_namespace))
        _kill_the_leader(kube_api, kube_namespace, first, second)
        wait_for_pool(kube_api, kube_namespace, "pool", "the new version", rolled_out("fireflow-worker:2"))
        wait_until("version 1 retired", lambda: _statefulsets(kube_api, kube_namespace) == ["pool-v2"], timeout=120)
        recorder.close()
        changes = recorder.ordered()
        revisions = _new_revisions(changes, before)
        assert revisions == {"pool-v2": 1}, f"one new ControllerRevision for one change: {revisions}"
        assert violations(changes) == []


def test_should_hand_the_lease_over_at_once_on_a_clean_exit(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess
) -> None:
    with _two_replicas(operator, kube_namespace) as (first, _):
        first.stop()  # SIGTERM: kopf exits, the Lease is handed over
        assert first.process is not None and first.process.returncode == 0, first.output()[-3_000:]
        assert holder(kube_api, kube_namespace) in (None, "operator-b")
        wait_until("operator-b leads", lambda: holder(kube_api, kube_namespace) == "operator-b", timeout=30)
