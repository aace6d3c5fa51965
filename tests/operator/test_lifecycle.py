"""The pool through its life: budget, migration gate, failed migration, operator restart, scale-down with
runs in flight, idleness, and secrets kept out of everything the operator writes."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from kubernetes.client import ApiClient, AppsV1Api, BatchV1Api, CoreV1Api, PolicyV1Api

from fireflow_local.postgres import LocalPostgres
from fireflow_worker import migrate
from fireflow_worker.client import FireflowClient
from tests.support.pools import (
    OperatorProcess,
    assert_no_secret,
    condition,
    create_pool,
    create_secret,
    get_pool,
    list_events,
    patch_pool,
    pool_events,
    rolled_out,
    set_schema_behind,
    wait_for_condition,
    wait_for_pool,
    wait_until,
)
from tests.support.recorder import Recorder, violations, worker_pods


def test_should_hold_a_pool_at_the_connection_budget_and_say_why(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, small_postgres: LocalPostgres
) -> None:
    url = small_postgres.create_database("budget")
    create_secret(kube_api, kube_namespace, url)
    create_pool(
        kube_api, kube_namespace, "big", replicas=1, dbos={"systemDatabasePoolSize": 10, "shutdownDrainTimeoutMs": 3000}
    )
    wait_for_condition(kube_api, kube_namespace, "big", "Ready")  # within the budget, its migration done
    patch_pool(kube_api, kube_namespace, "big", {"replicas": 5})
    pool = wait_for_condition(kube_api, kube_namespace, "big", "ConnectionBudget", "False")
    budget = pool["status"]["connectionBudget"]
    assert budget["maxConnections"] == 40
    assert budget["perReplica"] == 11
    assert budget["desiredReplicas"] == 5
    assert budget["allowedReplicas"] == budget["maxReplicas"] < 5
    message = condition(pool, "ConnectionBudget")["message"]
    assert message.startswith("5 replicas need 55 connections (11 each) but only ")
    assert message.endswith(f"holding at {budget['maxReplicas']}")
    assert condition(pool, "ConnectionBudget")["reason"] == "OverBudget"
    wait_until(
        "the StatefulSet at the budget",
        lambda: (
            AppsV1Api(kube_api).read_namespaced_stateful_set("big", kube_namespace).spec.replicas
            == budget["maxReplicas"]
        ),
    )
    wait_for_pool(kube_api, kube_namespace, "big", "settled below its size",
                  lambda p: condition(p, "Ready").get("reason") == "OverBudget")  # fmt: skip
    # One event for going over budget: the transition's, naming the conditions it changed, the scale-up's
    # rollout with them (posted after any event the same reconcile posted before it); Ready joining the cause
    # once the workers settled is none. The database's other clients at that moment decide whether the budget
    # holds the pool above its one replica (a rollout joins the event) or at it (nothing rolls out: Ready=False
    # is the cause's own).
    events = _events_once_posted(kube_api, kube_namespace, "OverBudget", "ConnectionBudget=False")
    if budget["maxReplicas"] > 1:
        changed = "ConnectionBudget=False, Degraded=True, Ready=False, Progressing=True"
    else:
        changed = "Ready=False, ConnectionBudget=False, Degraded=True"
    assert [(e.type, e.message) for e in events] == [("Warning", f"{changed}: {message}")]
    assert not [e for e in list_events(kube_api, kube_namespace) if e.reason in ("RollingOut", "ReplicasNotReady")]
    assert_no_secret(kube_api, kube_namespace, operator, url)


def _events_once_posted(api: ApiClient, namespace: str, reason: str, text: str) -> list[Any]:
    """Every event with `reason`, once one saying `text` is there (the operator posts a reconcile's events in
    order, the transitions' last)."""
    wait_until(
        f"a {reason} event saying {text!r}",
        lambda: any(e.reason == reason and text in str(e.message) for e in list_events(api, namespace)),
    )
    return [e for e in list_events(api, namespace) if e.reason == reason]


def test_should_start_no_pod_of_a_new_version_before_its_migration_succeeded(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, pool_database: str
) -> None:
    create_secret(kube_api, kube_namespace, pool_database)
    recorder = Recorder(kube_api, kube_namespace)
    create_pool(kube_api, kube_namespace, "pool", replicas=2, migration={"strategy": "Offline"})
    wait_for_condition(kube_api, kube_namespace, "pool", "Ready")
    before = len(_events_until_ready(kube_api, kube_namespace))
    set_schema_behind(pool_database)
    patch_pool(kube_api, kube_namespace, "pool", {"image": "fireflow-worker:2"})
    wait_for_pool(kube_api, kube_namespace, "pool", "the new version", rolled_out("fireflow-worker:2"))
    required = migrate.required_version()
    assert migrate.current_version(pool_database) == required
    # One event per step: plan, drain, apply, schema current, the new workers ready.
    upgrade = _events_until_ready(kube_api, kube_namespace, before)[before:]
    assert upgrade == [
        ("Normal", "PlanningMigration", "SchemaReady=False, Ready=False, Progressing=True: a plan Job of the target "
                                        "image compares the database's schema version with the one it requires"),
        ("Normal", "DrainingForMigration", f"SchemaReady=False: schema {required - 3} is behind {required}: draining "
                                           "the pool, as spec.migration.strategy is Offline"),
        ("Normal", "ApplyingMigration", f"SchemaReady=False: no worker left: migrating schema {required - 3} to "
                                        f"{required}"),
        ("Normal", "SchemaCurrent", f"SchemaReady=True: migrated to schema {required}"),
        ("Normal", "AllReplicasReady", "Ready=True, Progressing=False: 2/2 replicas ready"),
    ]  # fmt: skip
    recorder.close()
    changes = recorder.ordered()
    assert violations(changes) == []
    applies = {c.name for c in changes if c.kind == "Job" and c.component == "migration-apply"}
    assert len(applies) == 2  # the first rollout's and this upgrade's
    workers = worker_pods(changes)
    assert {c.image for c in workers if c.type == "ADDED"} == {"fireflow-worker:1", "fireflow-worker:2"}
    old_gone = [c for c in workers if c.type == "DELETED" and c.image == "fireflow-worker:1"]
    assert len(old_gone) == 2  # drained to zero before the migration ran


def _events_until_ready(api: ApiClient, namespace: str, after: int = 0) -> list[tuple[str, str, str]]:
    """The pool's events once one posted after the first `after` says its workers are ready."""

    def posted() -> list[tuple[str, str, str]]:
        events = pool_events(api, namespace, "pool")
        return events if any(reason == "AllReplicasReady" for _, reason, _ in events[after:]) else []

    found: list[tuple[str, str, str]] = wait_until("the event of the workers ready", posted)
    return found


def test_should_keep_the_old_version_when_the_migration_fails_then_retry(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, pool_database: str
) -> None:
    create_secret(kube_api, kube_namespace, pool_database)
    create_pool(kube_api, kube_namespace, "pool", replicas=2, migration={"lockTimeoutMs": 300, "retries": 0})
    wait_for_condition(kube_api, kube_namespace, "pool", "Ready")
    set_schema_behind(pool_database)
    holder = psycopg.connect(pool_database)
    holder.execute("LOCK TABLE dbos.workflow_status IN ACCESS SHARE MODE")  # a long reader, in a transaction
    patch_pool(kube_api, kube_namespace, "pool", {"image": "fireflow-worker:2"})
    pool = wait_for_condition(kube_api, kube_namespace, "pool", "SchemaReady", "False")
    pool = wait_for_pool(
        kube_api,
        kube_namespace,
        "pool",
        "the failure",
        lambda p: condition(p, "SchemaReady").get("reason") == "MigrationFailed",
    )
    message = condition(pool, "SchemaReady")["message"]
    assert message.startswith("migration attempt 1 of 3 failed: lock timeout: ")
    assert "canceling statement due to lock timeout" in message
    _events_once_posted(kube_api, kube_namespace, "MigrationFailed", "attempt 1 of 3 failed")
    failure = [(e.type, e.reason, e.message) for e in list_events(kube_api, kube_namespace)
               if "attempt 1 of 3 failed" in str(e.message)]  # fmt: skip
    assert failure == [("Warning", "MigrationFailed", f"SchemaReady=False, Degraded=True: {message}")]
    # Restored: the old version at its size.
    wait_until(
        "the old version back at size",
        lambda: AppsV1Api(kube_api).read_namespaced_stateful_set("pool", kube_namespace).spec.replicas == 2,
    )
    sts = AppsV1Api(kube_api).read_namespaced_stateful_set("pool", kube_namespace)
    assert sts.spec.template.spec.containers[0].image == "fireflow-worker:1"
    assert pool["status"]["currentImage"] == "fireflow-worker:1"
    holder.close()  # the lock goes: the next attempt succeeds
    wait_for_pool(kube_api, kube_namespace, "pool", "the retried rollout", rolled_out("fireflow-worker:2"))
    assert_no_secret(kube_api, kube_namespace, operator, pool_database)


def test_should_resume_its_migration_without_a_second_job_when_the_operator_restarts(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, pool_database: str
) -> None:
    create_secret(kube_api, kube_namespace, pool_database)
    recorder = Recorder(kube_api, kube_namespace)
    create_pool(kube_api, kube_namespace, "pool", replicas=1, migration={"lockTimeoutMs": 1000, "retries": 30})
    wait_for_condition(kube_api, kube_namespace, "pool", "Ready")
    set_schema_behind(pool_database)
    holder = psycopg.connect(pool_database)
    holder.execute("LOCK TABLE dbos.workflow_status IN ACCESS SHARE MODE")
    patch_pool(kube_api, kube_namespace, "pool", {"image": "fireflow-worker:2"})
    wait_until(
        "the apply Job to run",
        lambda: [
            j
            for j in BatchV1Api(kube_api).list_namespaced_job(kube_namespace).items
            if "-apply-" in j.metadata.name and "fireflow-worker:2" in json.dumps(j.metadata.annotations)
        ],
    )
    operator.kill()
    restarted = OperatorProcess(operator.cluster).start()
    try:
        holder.close()
        wait_for_pool(kube_api, kube_namespace, "pool", "the rollout", rolled_out("fireflow-worker:2"))
        changes = recorder.ordered()
        upgrade_applies = {
            c.name for c in changes if c.kind == "Job" and c.component == "migration-apply" and c.image.endswith(":2")
        }
        assert len(upgrade_applies) == 1  # the restarted operator found its Job, started none
        assert violations(changes, online=True) == []  # Online: the old version served during the apply
    finally:
        recorder.close()
        restarted.stop()


def test_should_leave_no_pending_runs_of_departed_workers_when_scaled_down_mid_run(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, pool_database: str
) -> None:
    create_secret(kube_api, kube_namespace, pool_database)
    create_pool(
        kube_api,
        kube_namespace,
        "pool",
        replicas=3,
        dbos={"workerConcurrency": 2, "pollingIntervalMs": 50, "shutdownDrainTimeoutMs": 1000},
    )
    wait_for_condition(kube_api, kube_namespace, "pool", "Ready")
    flow = {"name": "nap", "nodes": {"nap": {"type": "sleep", "params": {"seconds": 6}}}}
    with FireflowClient(pool_database) as client:
        runs = [client.enqueue(flow) for _ in range(6)]

        def executors() -> dict[str, str]:
            with psycopg.connect(pool_database) as conn:
                rows = conn.execute("SELECT workflow_uuid, executor_id, status FROM dbos.workflow_status").fetchall()
            return {str(r[0]): f"{r[1]}:{r[2]}" for r in rows}

        wait_until(
            "runs on all three workers",
            lambda: len({v.split(":")[0] for v in executors().values() if v.endswith(":PENDING")}) == 3,
        )
        patch_pool(kube_api, kube_namespace, "pool", {"replicas": 1})
        for run_id in runs:
            assert client.result(run_id) == {"nap": {"slept_seconds": 6}}
    departed = {f"{kube_namespace}.pool-1", f"{kube_namespace}.pool-2"}
    with psycopg.connect(pool_database) as conn:
        stranded = conn.execute(
            "SELECT count(*) FROM dbos.workflow_status WHERE status = 'PENDING' AND executor_id = ANY(%s)",
            (list(departed),),
        ).fetchone()
    assert stranded == (0,)
    pool = get_pool(kube_api, kube_namespace, "pool")
    assert pool["status"]["recoveredRuns"] >= 1
    assert any(e.reason == "RunsRecovered" for e in list_events(kube_api, kube_namespace))


@pytest.fixture
def own_postgres() -> Iterator[LocalPostgres]:
    """A server of the test's own: pools of other tests on the session's server change its budget."""
    with LocalPostgres(max_connections=200) as server:
        yield server


def test_should_write_nothing_while_a_ready_pool_is_idle(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, own_postgres: LocalPostgres
) -> None:
    create_secret(kube_api, kube_namespace, own_postgres.create_database("idle"))
    create_pool(kube_api, kube_namespace, "pool", replicas=2)
    wait_for_condition(kube_api, kube_namespace, "pool", "Ready")
    time.sleep(5)  # let the last status write of the rollout land

    def versions() -> dict[str, str]:
        pool = get_pool(kube_api, kube_namespace, "pool")
        return {
            "pool": pool["metadata"]["resourceVersion"],
            "sts": AppsV1Api(kube_api).read_namespaced_stateful_set("pool", kube_namespace).metadata.resource_version,
            "service": CoreV1Api(kube_api)
            .read_namespaced_service("pool-workers", kube_namespace)
            .metadata.resource_version,
            "pdb": PolicyV1Api(kube_api)
            .read_namespaced_pod_disruption_budget("pool", kube_namespace)
            .metadata.resource_version,
            "events": str(len(list_events(kube_api, kube_namespace))),
        }

    before, status_before = versions(), get_pool(kube_api, kube_namespace, "pool")["status"]
    time.sleep(60)  # a minute of resyncs every 5 s: the behaviour under test is what happens over time
    status_after = get_pool(kube_api, kube_namespace, "pool")["status"]
    assert status_after == status_before
    assert versions() == before
