"""Health tells the truth: a pool whose pods cannot run says so, in the pods' own words, within seconds;
pools that would silently share different queue settings on one database are refused."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes.client import ApiClient, AppsV1Api

from fireflow_worker.client import FireflowClient
from tests.support.pools import (
    OperatorProcess,
    condition,
    create_pool,
    create_secret,
    patch_pool,
    wait_for_condition,
    wait_for_pool,
)

PROBLEM_WAIT = 60.0  # the kubelet's (or process node's) own back-off comes first


def _degraded_by(reasons: tuple[str, ...]) -> Any:
    return lambda p: condition(p, "Degraded").get("reason") in reasons


def test_should_say_a_plan_job_cannot_pull_its_image(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, pool_database: str
) -> None:
    create_secret(kube_api, kube_namespace, pool_database)
    started = time.monotonic()
    create_pool(kube_api, kube_namespace, "pool", replicas=1, image="registry.invalid/nope:1")
    pool = wait_for_pool(kube_api, kube_namespace, "pool", "the pull failure",
                         _degraded_by(("ErrImagePull", "ImagePullBackOff")))  # fmt: skip
    assert time.monotonic() - started < PROBLEM_WAIT
    message = condition(pool, "Degraded")["message"]
    assert message.startswith("pod pool-plan-") and "container migrate: " in message
    assert condition(pool, "Ready")["status"] == "False" and pool["status"]["phase"] == "Degraded"


@pytest.mark.parametrize("strategy", ["Online", "Offline"])
def test_should_keep_the_old_image_serving_when_a_new_image_cannot_be_pulled(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, pool_database: str, strategy: str
) -> None:
    """The commonest bad rollout, a typo in the image name: its plan Job never starts, so nothing is drained or
    replaced; the pool says why, and reverting the image is immediate."""
    create_secret(kube_api, kube_namespace, pool_database)
    create_pool(kube_api, kube_namespace, "pool", replicas=2, migration={"strategy": strategy},
                rollout={"progressDeadlineSeconds": 15, "autoRollback": True})  # fmt: skip
    wait_for_condition(kube_api, kube_namespace, "pool", "Ready")
    patch_pool(kube_api, kube_namespace, "pool", {"image": "registry.invalid/fireflow-wroker:1"})
    pool = wait_for_pool(kube_api, kube_namespace, "pool", "the pull failure",
                         _degraded_by(("ErrImagePull", "ImagePullBackOff")))  # fmt: skip
    assert condition(pool, "Degraded")["message"].startswith("pod pool-plan-")
    time.sleep(20)  # past the progress deadline: still nothing drained or replaced
    with FireflowClient(pool_database) as client:
        runs = [client.enqueue({"name": "t", "nodes": {"t": {"type": "template", "params": {"template": "x"}}}})
                for _ in range(5)]  # fmt: skip
        assert [client.result(r, timeout_seconds=60) for r in runs] == [{"t": "x"}] * 5
    sts = AppsV1Api(kube_api).read_namespaced_stateful_set("pool", kube_namespace)
    assert sts.spec.template.spec.containers[0].image == "fireflow-worker:1"
    assert (sts.status.ready_replicas, sts.spec.replicas) == (2, 2)
    patch_pool(kube_api, kube_namespace, "pool", {"image": "fireflow-worker:1"})
    wait_for_pool(kube_api, kube_namespace, "pool", "healthy again", lambda p: condition(p, "Ready")["status"] == "True"
                  and condition(p, "Degraded").get("status") == "False")  # fmt: skip


def test_should_say_workers_crash_loop_and_why(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, pool_database: str
) -> None:
    create_secret(kube_api, kube_namespace, pool_database)
    create_pool(kube_api, kube_namespace, "pool", replicas=1)
    wait_for_condition(kube_api, kube_namespace, "pool", "Ready")
    patch_pool(kube_api, kube_namespace, "pool", {"env": [{"name": "PYTHONHOME", "value": "/nonexistent"}]})
    pool = wait_for_pool(kube_api, kube_namespace, "pool", "the crash loop", _degraded_by(("CrashLoopBackOff",)))
    message = condition(pool, "Degraded")["message"]
    assert message.startswith("pod pool-0 container worker: ") and "last exit code 1" in message
    assert condition(pool, "Ready") == {**condition(pool, "Ready"), "status": "False", "reason": "CrashLoopBackOff"}


def test_should_say_a_container_cannot_be_configured(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, pool_database: str
) -> None:
    create_secret(kube_api, kube_namespace, pool_database)
    # A shared Secret without the key (a missing Secret is refused before anything is built: test_security.py).
    create_secret(kube_api, kube_namespace, pool_database, name="tokens")
    missing = {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "tokens", "key": "t"}}}
    create_pool(kube_api, kube_namespace, "pool", replicas=1, env=[missing])
    pool = wait_for_pool(kube_api, kube_namespace, "pool", "the config error",
                         _degraded_by(("CreateContainerConfigError",)))  # fmt: skip
    assert f"couldn't find key t in Secret {kube_namespace}/tokens" in condition(pool, "Degraded")["message"]


def test_should_say_the_statefulset_cannot_create_pods(
    kube_api: ApiClient, kube_namespace: str, kube_cluster: Any, pool_database: str
) -> None:
    operator = OperatorProcess(kube_cluster, FIREFLOW_OPERATOR_ALLOWED_SERVICE_ACCOUNTS="ghost").start()
    try:
        create_secret(kube_api, kube_namespace, pool_database)
        create_pool(kube_api, kube_namespace, "pool", replicas=1, serviceAccountName="ghost")
        pool = wait_for_pool(kube_api, kube_namespace, "pool", "FailedCreate", _degraded_by(("FailedCreate",)))
        message = condition(pool, "Degraded")["message"]
        assert message.startswith("Job pool-plan-") or message.startswith("StatefulSet pool: ")
        assert 'serviceaccount "ghost" not found' in message
    finally:
        operator.stop()


def test_should_refuse_a_pool_whose_queue_settings_differ_from_an_older_pool_on_the_database(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, pool_database: str
) -> None:
    create_secret(kube_api, kube_namespace, pool_database)
    dbos: dict[str, Any] = {"workerConcurrency": 2, "shutdownDrainTimeoutMs": 3000}
    create_pool(kube_api, kube_namespace, "first", replicas=1, dbos=dbos)
    wait_for_condition(kube_api, kube_namespace, "first", "Ready")
    create_pool(kube_api, kube_namespace, "second", replicas=1, dbos={**dbos, "workerConcurrency": 40})
    pool = wait_for_pool(kube_api, kube_namespace, "second", "the conflict", _degraded_by(("QueueSettingsConflict",)))
    assert condition(pool, "Degraded")["message"] == (
        f"pool {kube_namespace}/first on this database sets workerConcurrency 2 for fireflow-executions, this pool "
        "40: DBOS keeps one setting per queue and database, so one of them would silently not apply. Use the same "
        "spec.dbos settings for the queues both serve, or another database. Nothing was rolled out."
    )
    assert [s.metadata.name for s in AppsV1Api(kube_api).list_namespaced_stateful_set(kube_namespace).items] == [
        "first"
    ]
