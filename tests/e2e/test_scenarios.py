"""The product end to end, as a user meets it: the operator installed with `helm install` (a pod under the
chart's ServiceAccount and RBAC), a Secret and a pool applied, runs enqueued and followed through the
client, then scaling, a lost pod, an upgrade that needs a migration, a migration that cannot take its lock,
a pool larger than the database allows, a PostgreSQL restart, and `helm uninstall`.

One operator serves every scenario (module-scoped); each scenario has its own namespace and database. The
uninstall scenario runs last and installs the operator again at its end. Waits are generous and nothing
asserts a duration: the order of what happened comes from Kubernetes watch events (resourceVersion order).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

import pytest
from kubernetes.client import ApiextensionsV1Api, AppsV1Api, BatchV1Api, CoreV1Api, RbacAuthorizationV1Api
from kubernetes.client.exceptions import ApiException

from fireflow_worker import migrate
from fireflow_worker.client import FireflowClient
from tests.e2e.databases import Database
from tests.e2e.harness import Json, OperatorRelease, Stage, worker_pod
from tests.e2e.runs import (
    WAIT,
    greet_flow,
    greeting,
    results,
    runs,
    set_schema_behind,
    sleep_flow,
    table_lock,
    trace_flow,
    wait_finished,
)
from tests.e2e.watch import Observed
from tests.kube import rawapi
from tests.support.pools import condition, wait_until

pytestmark = pytest.mark.e2e

CRD_NAME = "fireflowworkerpools.fireflow.persistent.ai"


def _greet(client: FireflowClient, prefix: str, count: int) -> dict[str, str]:
    """Enqueue `count` greetings; returns run id -> whom it greets."""
    return {client.enqueue(greet_flow(), inputs={"who": f"{prefix}-{i}"}): f"{prefix}-{i}" for i in range(count)}


def _assert_greeted(stage: Stage, greeted: dict[str, str]) -> None:
    ended = wait_finished(stage.urls.local, list(greeted))
    assert {run_id: r.status for run_id, r in ended.items()} == dict.fromkeys(greeted, "SUCCESS")
    assert results(stage.urls.local, list(greeted)) == {run_id: greeting(who) for run_id, who in greeted.items()}


def _wait_event(stage: Stage, reason: str, text: str = "") -> Json:
    """The pool's first event with `reason` whose message holds `text` (the operator posts events right after
    writing the status; a condition's transition and the action itself may share a reason)."""

    def find() -> Json | None:
        return next((e for e in stage.events() if e["reason"] == reason and text in (e.get("message") or "")), None)

    found: Json = wait_until(f"an event {reason} saying {text!r}", find, WAIT)
    return found


def _not_found(read: Callable[[], object]) -> bool:
    try:
        read()
    except ApiException as error:
        if error.status == 404:
            return True
        raise
    return False


def test_should_run_200_flows_through_a_pool_applied_after_helm_install(
    stage: Stage, operator: OperatorRelease
) -> None:
    (operator_pod,) = operator.pods()
    assert operator_pod["spec"]["serviceAccountName"] == operator.deployment  # the chart's, not "default"
    stage.apply_pool(replicas=2)
    pool = stage.wait_ready(replicas=2)
    status = pool["status"]
    assert status["phase"] == "Running"
    for kind in ("Ready", "SchemaReady", "ConnectionBudget"):
        assert condition(pool, kind)["status"] == "True", condition(pool, kind)
    assert status["schemaVersion"] == migrate.required_version()
    assert sorted(p["metadata"]["name"] for p in stage.ready_workers()) == ["pool-0", "pool-1"]

    with FireflowClient(stage.urls.local) as client:
        greeted = _greet(client, "user", 200)
    _assert_greeted(stage, greeted)
    executors = {r.executor for r in runs(stage.urls.local, list(greeted)).values()}
    assert executors <= stage.executors(2)  # the workers' ids are <namespace>.<pod>


def test_should_finish_every_run_when_scaled_from_3_to_1_with_runs_in_flight(stage: Stage) -> None:
    url = stage.urls.local
    stage.apply_pool(replicas=3, dbos={"workerConcurrency": 2, "shutdownDrainTimeoutMs": 1000})
    stage.wait_ready(replicas=3)
    with FireflowClient(url) as client:
        run_ids = [client.enqueue(sleep_flow(10)) for _ in range(6)]  # 10 s: far beyond the 1 s drain

    def in_flight_everywhere() -> bool:
        pending = {r.executor for r in runs(url, run_ids).values() if r.status == "PENDING"}
        return pending == stage.executors(3)

    wait_until("runs in flight on all three workers", in_flight_everywhere, WAIT)
    stage.patch({"replicas": 1})

    ended = wait_finished(url, run_ids)
    assert {r.status for r in ended.values()} == {"SUCCESS"}
    assert results(url, run_ids) == {run_id: {"nap": {"slept_seconds": 10}} for run_id in run_ids}
    assert [r for r in runs(url).values() if r.status in ("PENDING", "ENQUEUED")] == []
    pool = stage.wait_ready(replicas=1)
    assert [p["metadata"]["name"] for p in stage.ready_workers()] == ["pool-0"]
    assert pool["status"]["recoveredRuns"] >= 1  # the departed workers' runs were handed back, not waited for
    _wait_event(stage, "RunsRecovered")


def test_should_resume_a_run_whose_worker_pod_was_deleted_without_running_a_finished_node_again(
    stage: Stage,
) -> None:
    url, tracer = stage.urls.local, stage.tracer
    stage.apply_pool(replicas=1, dbos={"shutdownDrainTimeoutMs": 2000})
    stage.wait_ready(replicas=1)
    (worker,) = stage.ready_workers()
    key = uuid.uuid4().hex
    with FireflowClient(url) as client:
        run_id = client.enqueue(trace_flow(tracer, key, seconds=20))
    wait_until("the run's first node to have run", lambda: tracer.labels(key) == ["first"], WAIT)
    assert runs(url, [run_id])[run_id].status == "PENDING"  # mid-run: sleeping between the two side effects

    rawapi.call(CoreV1Api(stage.api).delete_namespaced_pod, worker["metadata"]["name"], stage.namespace)

    def replaced() -> bool:
        return any(p["metadata"]["uid"] != worker["metadata"]["uid"] for p in stage.ready_workers())

    wait_until("a new pool-0", replaced, WAIT)
    ended = wait_finished(url, [run_id])
    assert ended[run_id].status == "SUCCESS"
    assert ended[run_id].executor == stage.executor("pool-0")  # resumed under the same id by the new pod
    assert ended[run_id].recovery_attempts >= 1  # a graceful drain gives its recovery attempt back
    result = results(url, [run_id])[run_id]
    assert (result["first"]["body"], result["nap"], result["last"]["body"]) == (
        {"recorded": "first"},
        {"slept_seconds": 20},
        {"recorded": "last"},
    )
    assert tracer.labels(key) == ["first", "last"]  # each node's body ran exactly once


def _upgrade_order(events: list[Observed], old: str, new: str) -> list[Observed]:
    """The upgrade's milestones, each the first watch event that shows it."""

    def first(what: str, predicate: Callable[[Observed], bool]) -> Observed:
        found = next((e for e in events if predicate(e)), None)
        assert found is not None, f"no watch event shows {what}: {events}"
        return found

    old_workers_gone = [e for e in events if e.kind == "Pod" and e.type == "DELETED" and worker_pod(e.name)]
    assert {e.name for e in old_workers_gone if e.image == old} >= {"pool-0", "pool-1"}
    return [
        first("the StatefulSet at zero", lambda e: e.kind == "StatefulSet" and e.replicas == 0),
        max((e for e in old_workers_gone if e.image == old), key=lambda e: e.rv),
        first("the apply Job", lambda e: e.kind == "Job" and "-apply-" in e.name and e.image == new),
        first(
            "the apply Job complete",
            lambda e: e.kind == "Job" and "-apply-" in e.name and e.image == new and "Complete" in e.done,
        ),
        first("a worker of the new version", lambda e: e.kind == "Pod" and worker_pod(e.name) and e.image == new),
    ]


def test_should_drain_migrate_and_then_start_the_new_version_when_an_upgrade_needs_a_migration(
    stage: Stage,
) -> None:
    url, old, new = stage.urls.local, stage.images.worker_v1, stage.images.worker_v2
    stage.apply_pool(replicas=2, migration={"strategy": "Offline"})  # the drain-to-zero strategy
    stage.wait_ready(replicas=2)
    recorder = stage.record()
    with FireflowClient(url) as client:
        in_flight = [client.enqueue(sleep_flow(4)) for _ in range(4)]
        set_schema_behind(url)
        stage.patch({"image": new})
        recorder.wait_for(
            "both old workers gone",
            lambda e: e.kind == "Pod" and e.type == "DELETED" and e.name == "pool-1" and e.image == old,
        )
        recorder.wait_for(
            "both old workers gone",
            lambda e: e.kind == "Pod" and e.type == "DELETED" and e.name == "pool-0" and e.image == old,
        )
        queued = _greet(client, "queued", 20)  # no worker exists now: these wait for the new version
    pool = stage.wait_ready(image=new, replicas=2)
    _assert_greeted(stage, queued)
    assert {r.status for r in wait_finished(url, in_flight).values()} == {"SUCCESS"}
    assert migrate.current_version(url) == migrate.required_version()
    assert pool["status"]["schemaVersion"] == migrate.required_version()

    assert recorder.gaps == 0, "a watch expired: the recorded order may miss events"
    events = recorder.ordered()
    milestones = _upgrade_order(events, old, new)
    assert [e.rv for e in milestones] == sorted(e.rv for e in milestones), (
        "expected: StatefulSet at zero < last old worker deleted < apply Job created < apply Job complete < "
        f"first new worker; got {milestones}"
    )
    drained_at = milestones[0].rv
    old_again = [e for e in events if e.rv > drained_at and e.kind == "Pod" and e.type == "ADDED" and e.image == old]
    assert not old_again, "a worker of the old version started after the drain"


def test_should_keep_the_old_version_and_say_why_when_the_migration_cannot_take_its_lock(stage: Stage) -> None:
    """With one codebase behind both tags, the lowered schema version is "behind" for the old workers too, so
    they cannot pass their own schema check while the lock is held (an older image would): what the operator
    guarantees, and this asserts, is the old version restored at its size and no worker of the new one."""
    url, old, new = stage.urls.local, stage.images.worker_v1, stage.images.worker_v2
    stage.apply_pool(replicas=2, migration={"lockTimeoutMs": 300, "retries": 0})
    stage.wait_ready(replicas=2)
    recorder = stage.record()
    set_schema_behind(url)
    with table_lock(url):  # a long reader of dbos.workflow_status: the migration's ALTER cannot get its lock
        stage.patch({"image": new})
        pool = stage.wait_pool(
            "SchemaReady=False (MigrationFailed)",
            lambda p: condition(p, "SchemaReady").get("reason") == "MigrationFailed",
        )
        schema_ready = condition(pool, "SchemaReady")
        assert schema_ready["status"] == "False"
        assert "lock timeout" in schema_ready["message"], schema_ready
        _wait_event(stage, "MigrationFailed", "lock timeout")

        # The Job failed fast: one attempt, ended by the lock timeout (not by its deadline).
        jobs = rawapi.call(BatchV1Api(stage.api).list_namespaced_job, stage.namespace)["items"]
        failed = [
            j
            for j in jobs
            if "-apply-" in j["metadata"]["name"]
            and any(c["type"] == "Failed" and c["status"] == "True" for c in j["status"].get("conditions", []))
        ]
        assert failed, [j["metadata"]["name"] for j in jobs]
        assert all(c.get("reason") != "DeadlineExceeded" for j in failed for c in j["status"]["conditions"])
        job_pods = rawapi.call(CoreV1Api(stage.api).list_namespaced_pod, stage.namespace,
                               label_selector=f"job-name={failed[0]['metadata']['name']}")["items"]  # fmt: skip
        (terminated,) = [s["state"]["terminated"] for p in job_pods for s in p["status"]["containerStatuses"]]
        summary = json.loads(terminated["message"].strip().splitlines()[-1])
        assert summary["attempts"] == 1 and "lock timeout" in summary["error"], summary

        # The old version is put back at its size; the new one never starts while its migration fails.
        def old_version_restored(pool: Json) -> bool:
            sts = stage.statefulset()
            image = sts["spec"]["template"]["spec"]["containers"][0]["image"]
            pods = stage.pods()
            return (
                image == old
                and sts["spec"]["replicas"] == 2
                and len(pods) == 2
                and all(p["spec"]["containers"][0]["image"] == old for p in pods)
            )

        pool = stage.wait_pool("the old version back at its size", old_version_restored)
        assert pool["status"]["currentImage"] == old
        assert pool["status"]["targetImage"] == new
        assert condition(pool, "SchemaReady")["status"] == "False"
        new_workers = [e for e in recorder.ordered() if e.kind == "Pod" and worker_pod(e.name) and e.image == new]
        assert not new_workers, "a worker of the new version started before its migration succeeded"

    pool = stage.wait_ready(image=new, replicas=2)  # the lock is gone: the next attempt succeeds
    assert condition(pool, "SchemaReady")["status"] == "True"
    assert migrate.current_version(url) == migrate.required_version()
    with FireflowClient(url) as client:
        greeted = _greet(client, "after", 5)
    _assert_greeted(stage, greeted)


def test_should_hold_a_pool_at_the_database_connection_budget_and_say_why(
    dedicated_stage: Callable[[int], tuple[Database, Stage]],
) -> None:
    server, stage = dedicated_stage(40)
    stage.apply_pool(replicas=5)  # 5 x (10 pooled + 1 LISTEN) connections: more than 40 allow
    pool = stage.wait_pool(
        "ConnectionBudget=False", lambda p: condition(p, "ConnectionBudget").get("status") == "False"
    )
    budget_condition = condition(pool, "ConnectionBudget")
    assert budget_condition["reason"] == "OverBudget"
    assert budget_condition["message"].startswith("5 replicas need 55 connections (11 each) but only ")
    budget = pool["status"]["connectionBudget"]
    assert (budget["maxConnections"], budget["perReplica"], budget["desiredReplicas"]) == (40, 11, 5)
    _wait_event(stage, "OverBudget", "5 replicas need 55 connections (11 each) but only ")

    def held_at_budget(pool: Json) -> bool:
        status = pool.get("status") or {}
        allowed = (status.get("connectionBudget") or {}).get("allowedReplicas")
        return (
            isinstance(allowed, int)
            and 1 <= allowed < 5
            and stage.statefulset()["spec"]["replicas"] == allowed
            and status.get("readyReplicas") == allowed
            and len(stage.ready_workers()) == allowed
        )

    pool = stage.wait_pool("the workers that fit, ready", held_at_budget)
    assert pool["spec"]["replicas"] == 5  # the user's wish stays; only what runs is held
    assert condition(pool, "ConnectionBudget")["status"] == "False"
    with FireflowClient(stage.urls.local) as client:
        greeted = _greet(client, "budget", 20)
    _assert_greeted(stage, greeted)
    log = server.server_log()
    assert "too many clients" not in log and "remaining connection slots are reserved" not in log


def test_should_complete_every_run_when_postgresql_restarts_under_load(
    dedicated_stage: Callable[[int], tuple[Database, Stage]],
) -> None:
    server, stage = dedicated_stage(300)
    url = stage.urls.local
    stage.apply_pool(replicas=2)
    stage.wait_ready(replicas=2)
    flow = {
        "name": "nap-then-greet",
        "inputs": {"who": {"type": "string"}},
        "nodes": {
            "nap": {"type": "sleep", "params": {"seconds": 3}},
            "hello": {"type": "template", "params": {"template": "Hello, ${inputs.who}!"}, "after": ["nap"]},
        },
        "outputs": ["hello"],
    }
    with FireflowClient(url) as client:
        greeted = {client.enqueue(flow, inputs={"who": f"w{i}"}): f"w{i}" for i in range(40)}
    wait_until("runs in flight", lambda: any(r.status == "PENDING" for r in runs(url, list(greeted)).values()), WAIT)

    server.restart()

    ended = wait_finished(url, list(greeted))
    assert {run_id: r.status for run_id, r in ended.items()} == dict.fromkeys(greeted, "SUCCESS")
    assert results(url, list(greeted)) == {run_id: {"hello": f"Hello, {who}!"} for run_id, who in greeted.items()}


def test_should_leave_the_crd_pools_and_data_in_place_when_the_operator_is_uninstalled(
    stage: Stage, operator: OperatorRelease
) -> None:
    url, api = stage.urls.local, stage.api
    stage.apply_pool(replicas=1)
    stage.wait_ready(replicas=1)
    with FireflowClient(url) as client:
        before = _greet(client, "before", 5)
    _assert_greeted(stage, before)
    jobs_before = sorted(j["metadata"]["name"] for j in
                         rawapi.call(BatchV1Api(api).list_namespaced_job, stage.namespace)["items"])  # fmt: skip

    printed = operator.uninstall()
    try:
        assert "kept due to the resource policy" in printed and CRD_NAME in printed, printed
        # The operator goes: its Deployment, pod, ServiceAccount and cluster-wide RBAC.
        assert not operator.installed()
        wait_until("the operator's pod to be gone", lambda: not operator.pods(), WAIT)
        apps, core, rbac = AppsV1Api(api), CoreV1Api(api), RbacAuthorizationV1Api(api)
        assert _not_found(lambda: apps.read_namespaced_deployment(operator.deployment, operator.namespace))
        assert _not_found(lambda: core.read_namespaced_service_account(operator.deployment, operator.namespace))
        assert _not_found(lambda: rbac.read_cluster_role(operator.deployment))
        assert _not_found(lambda: rbac.read_cluster_role_binding(operator.deployment))

        # The keep policy: the CRD stays, and with it the pool, its workers and the database's data.
        crd = rawapi.call(ApiextensionsV1Api(api).read_custom_resource_definition, CRD_NAME)
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        assert not crd["metadata"].get("deletionTimestamp")
        pool = stage.pool()
        assert not pool["metadata"].get("deletionTimestamp")
        assert pool["status"]["currentImage"] == stage.images.worker_v1
        assert results(url, list(before)) == {run_id: greeting(who) for run_id, who in before.items()}
        assert [p["metadata"]["name"] for p in stage.ready_workers()] == ["pool-0"]
        with FireflowClient(url) as client:
            during = _greet(client, "without-operator", 5)
        _assert_greeted(stage, during)  # the data plane does not need the operator
    finally:
        operator.install()  # the kept pool's finalizer needs an operator; later scenarios do too

    # Installed again, the operator adopts the kept pool: it scales it, and starts no new migration.
    stage.patch({"replicas": 2})
    pool = stage.wait_ready(replicas=2)
    jobs_after = sorted(j["metadata"]["name"] for j in
                        rawapi.call(BatchV1Api(api).list_namespaced_job, stage.namespace)["items"])  # fmt: skip
    assert jobs_after == jobs_before
    assert pool["status"]["currentImage"] == stage.images.worker_v1
