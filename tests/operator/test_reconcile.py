"""A valid pool becomes exactly its children and a Ready, migrated pool of workers."""

from __future__ import annotations

from kubernetes.client import ApiClient, AppsV1Api, BatchV1Api, CoreV1Api, CustomObjectsApi, PolicyV1Api

from fireflow_operator.api.model import GROUP, PLURAL, VERSION
from fireflow_worker import migrate
from tests.support.pools import (
    OperatorProcess,
    condition,
    create_secret,
    pool_body,
    pool_events,
    wait_for_condition,
    wait_until,
)


def test_should_create_exactly_the_expected_children_and_become_ready(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, pool_database: str
) -> None:
    ns = kube_namespace
    create_secret(kube_api, ns, pool_database)
    CustomObjectsApi(kube_api).create_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, pool_body("workers", replicas=2)
    )
    pool = wait_for_condition(kube_api, ns, "workers", "Ready")
    status = pool["status"]
    assert status["phase"] == "Running"
    assert status["readyReplicas"] == 2
    assert status["schemaVersion"] == migrate.required_version()
    assert condition(pool, "SchemaReady")["status"] == "True"
    assert condition(pool, "ConnectionBudget")["status"] == "True"
    # /scale counts the current version only (the first version's pods carry no version label)
    assert status["selector"] == (
        "app.kubernetes.io/name=fireflow-worker,app.kubernetes.io/instance=workers,!fireflow.persistent.ai/version-index"
    )

    sts = AppsV1Api(kube_api).read_namespaced_stateful_set("workers", ns)
    assert sts.spec.replicas == 2
    assert sts.spec.pod_management_policy == "Parallel"
    env = {e.name: e for e in sts.spec.template.spec.containers[0].env}
    assert env["FIREFLOW_WORKER_ID"].value == "$(POD_NAMESPACE).$(POD_NAME)"
    assert env["DBOS_RUN_MIGRATIONS"].value == "false"
    assert env["DATABASE_URL_EXECUTIONS"].value_from.secret_key_ref.name == "fireflow-db"
    services = CoreV1Api(kube_api).list_namespaced_service(ns).items
    assert [s.metadata.name for s in services] == ["workers-workers"]
    assert services[0].spec.cluster_ip == "None"
    assert [p.metadata.name for p in PolicyV1Api(kube_api).list_namespaced_pod_disruption_budget(ns).items] == [
        "workers"
    ]
    # One event per transition (the conditions one cause changed share it): the plan Job, the budget, the
    # apply Job (online: the database was empty), the schema current, the workers ready.
    expected = ["PlanningMigration", "WithinBudget", "ApplyingMigration", "SchemaCurrent", "AllReplicasReady"]

    def posted() -> list[tuple[str, str, str]]:
        events = pool_events(kube_api, ns, "workers")
        return events if any(reason == "AllReplicasReady" for _, reason, _ in events) else []

    events = wait_until("the event of the workers ready", posted)
    assert [(kind, reason) for kind, reason, _ in events] == [("Normal", reason) for reason in expected]
    said = {reason: message for _, reason, message in events}
    assert said["PlanningMigration"].startswith("SchemaReady=False, Ready=False, Progressing=True, Degraded=False: ")
    assert said["PlanningMigration"].endswith("a plan Job of the target image compares the database's schema "
                                              "version with the one it requires")  # fmt: skip
    required = migrate.required_version()
    assert said["ApplyingMigration"] == (
        f"SchemaReady=False: schema 0 is behind {required}: applying online, the pool keeps serving"
    )
    assert said["SchemaCurrent"] == f"SchemaReady=True: migrated to schema {required}"
    assert said["AllReplicasReady"] == "Ready=True, Progressing=False: 2/2 replicas ready"
    # The plan and apply Jobs ran, and were deleted once the status held their outcome.
    wait_until("finished Jobs cleaned up", lambda: not BatchV1Api(kube_api).list_namespaced_job(ns).items)
    copy = CoreV1Api(kube_api).read_namespaced_secret("workers-connection", ns)  # kept for the finalizer
    assert copy.metadata.finalizers == ["fireflow.persistent.ai/recover-runs"]
    assert [o.name for o in copy.metadata.owner_references or []] == ["workers"]
    for child in (sts, services[0]):
        assert child.metadata is not None
        owner = (child.metadata.owner_references or [])[0]
        assert (owner.kind, owner.name, owner.controller) == ("FireflowWorkerPool", "workers", True)
    pods = CoreV1Api(kube_api).list_namespaced_pod(ns, label_selector="app.kubernetes.io/instance=workers").items
    worker_pods = sorted(
        p.metadata.name for p in pods if p.metadata.labels.get("app.kubernetes.io/component") == "worker"
    )
    assert worker_pods == ["workers-0", "workers-1"]
