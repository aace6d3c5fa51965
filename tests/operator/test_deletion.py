"""No stranded run when a pool goes: deleted mid-rollout (two versions' StatefulSets live), with and without an
operator restart, every version's PENDING runs are handed back and no other pool's; the finalizer called again
after it succeeded changes nothing. Against the real control plane and PostgreSQL."""

from __future__ import annotations

import psycopg
import pytest
from kubernetes.client import ApiClient, CoreV1Api, CustomObjectsApi

from fireflow_contract import executor_ids
from fireflow_operator import finalizer
from fireflow_operator.api import names
from fireflow_operator.api.model import GROUP, PLURAL, VERSION
from fireflow_operator.kube import Kube
from fireflow_operator.settings import load_settings
from fireflow_worker.client import FireflowClient
from tests.support.pools import (
    QUICK_DBOS,
    OperatorProcess,
    condition,
    create_pool,
    create_secret,
    get_pool,
    list_events,
    patch_pool,
    pool_gone,
    wait_for_condition,
    wait_for_pool,
    wait_until,
)
from tests.support.upgrade_traffic import run_rows, statuses

LONG = {"name": "long", "nodes": {"nap": {"type": "sleep", "params": {"seconds": 300}}}}


def _executors(url: str, runs: list[str]) -> dict[str, str]:
    return {run: executor for run, (_, _, executor) in run_rows(url, runs).items()}


def _pool_mid_rollout(api: ApiClient, namespace: str, url: str) -> tuple[list[str], str]:
    """A pool with PENDING runs on version 1 and on version 2 (`pool` and `pool-v2` both live), and a run
    claimed by a pod of another pool, `pool-b`, whose name starts with this pool's."""
    create_secret(api, namespace, url)
    create_pool(api, namespace, "pool", replicas=1, dbos={**QUICK_DBOS, "applicationVersion": "1"})
    wait_for_condition(api, namespace, "pool", "Ready")
    with FireflowClient(url) as client:
        old = [client.enqueue(LONG) for _ in range(3)]
        wait_until("version 1's runs claimed", lambda: statuses(url, old) == {"PENDING"})
        # Owned by a live pod of pool-b from now on (its worker would go on running it): not this pool's to hand back.
        sibling = old.pop()
        with psycopg.connect(url) as conn:
            conn.execute(
                "UPDATE dbos.workflow_status SET executor_id = %s WHERE workflow_uuid = %s",
                (executor_ids.executor_id(namespace, "pool-b-0"), sibling),
            )
        patch_pool(api, namespace, "pool", {"dbos": {"applicationVersion": "2"}})
        wait_for_pool(api, namespace, "pool", "two versions",
                      lambda p: len(p["status"].get("versions") or []) == 2
                      and condition(p, "Ready").get("status") == "True")  # fmt: skip
        new = [client.enqueue(LONG) for _ in range(2)]
        wait_until("version 2's runs claimed", lambda: statuses(url, new) == {"PENDING"})
    executors = _executors(url, old + new)
    assert {str(e).split(".")[1].rsplit("-", 1)[0] for e in executors.values()} == {"pool", "pool-v2"}, executors
    return old + new, sibling


@pytest.mark.parametrize("restart", [False, True], ids=["one-operator", "operator-restarted"])
def test_should_hand_back_every_versions_runs_when_a_pool_is_deleted_mid_rollout(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, pool_database: str, restart: bool
) -> None:
    runs, sibling = _pool_mid_rollout(kube_api, kube_namespace, pool_database)
    CustomObjectsApi(kube_api).delete_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, "pool")
    current = operator
    if restart:
        wait_until(
            "the deletion under way",
            lambda: condition(get_pool(kube_api, kube_namespace, "pool"), "Ready").get("reason") == "Deleting",
        )
        current.kill()
        current = OperatorProcess(operator.cluster).start()
    try:
        wait_until("the pool gone", lambda: pool_gone(kube_api, kube_namespace), timeout=120)
    finally:
        if current is not operator:
            current.stop()
    assert statuses(pool_database, runs) == {"ENQUEUED"}  # back on their queue, for any worker of their version
    assert statuses(pool_database, [sibling]) == {"PENDING"}
    assert _executors(pool_database, [sibling]) == {sibling: executor_ids.executor_id(kube_namespace, "pool-b-0")}
    secrets = {str(s.metadata.name) for s in CoreV1Api(kube_api).list_namespaced_secret(kube_namespace).items}
    assert names.connection_secret_name("pool") not in secrets  # the copy went with the pool
    if not restart:  # an event posted by a killed operator may be lost with it
        waits = [e for e in list_events(kube_api, kube_namespace) if e.reason == "Deleting"]
        assert waits and "waiting for the workers to drain and exit" in waits[0].message


def test_should_change_nothing_when_the_finalizer_is_called_again_after_it_succeeded(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, pool_database: str
) -> None:
    create_secret(kube_api, kube_namespace, pool_database)
    create_pool(kube_api, kube_namespace, "pool", replicas=1, dbos=QUICK_DBOS)
    wait_for_condition(kube_api, kube_namespace, "pool", "Ready")
    with FireflowClient(pool_database) as client:
        runs = [client.enqueue(LONG) for _ in range(2)]
    wait_until("runs claimed", lambda: statuses(pool_database, runs) == {"PENDING"})
    operator.stop()  # the finalizer is called here, as kopf would call it, twice
    core = CoreV1Api(kube_api)
    core.delete_namespaced_secret("fireflow-db", kube_namespace)  # as when the whole namespace goes
    CustomObjectsApi(kube_api).delete_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, "pool")
    kube, settings = Kube.from_client(kube_api), load_settings({})

    def finalize() -> finalizer.Waiting | None:
        return finalizer.finalize(kube, settings, get_pool(kube_api, kube_namespace, "pool"))

    wait_until("the finalizer done", lambda: finalize() is None, timeout=120)
    assert statuses(pool_database, runs) == {"ENQUEUED"}
    with FireflowClient(pool_database) as client:  # a run's history after the hand-back is left alone
        client.cancel(runs[0])
    assert finalize() is None
    assert finalize() is None
    assert statuses(pool_database, runs[1:]) == {"ENQUEUED"} and statuses(pool_database, runs[:1]) == {"CANCELLED"}
    pool = get_pool(kube_api, kube_namespace, "pool")
    assert condition(pool, "Degraded").get("reason") != "RunsNotRecovered"
    assert pool["metadata"]["annotations"][names.ANNOTATION_RUNS_HANDED_BACK] == "1"  # one pod held the runs
    CustomObjectsApi(kube_api).patch_namespaced_custom_object(
        GROUP, VERSION, kube_namespace, PLURAL, "pool", {"metadata": {"finalizers": None}}
    )
    wait_until("the pool gone", lambda: pool_gone(kube_api, kube_namespace))
