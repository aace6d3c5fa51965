"""The operator's promises on the paths that broke them: old schemas, every connection limit PostgreSQL
enforces, others' bursts, a migration that keeps failing, and pools deleted together with their Secret or
their namespace. Against the real control plane and real PostgreSQL servers."""

from __future__ import annotations

import threading
import time
import urllib.request
from typing import Any
from unittest import mock

import psycopg
import pytest
import sqlalchemy as sa
import urllib3
from dbos import _migration
from kubernetes import watch
from kubernetes.client import ApiClient, AppsV1Api, BatchV1Api, CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

from fireflow_local.ports import free_port
from fireflow_local.postgres import LocalPostgres
from fireflow_operator.api.model import GROUP, PLURAL, VERSION
from fireflow_worker import migrate
from fireflow_worker.client import FireflowClient
from tests.kube.plugin import fresh_namespace
from tests.support.pools import (
    OperatorProcess,
    assert_no_secret,
    condition,
    create_pool,
    create_secret,
    get_pool,
    list_events,
    patch_pool,
    pool_gone,
    rolled_out,
    set_schema_behind,
    wait_for_condition,
    wait_for_pool,
    wait_until,
)

NAP = {"name": "nap", "nodes": {"nap": {"type": "sleep", "params": {"seconds": 60}}}}
QUICK = {"dbos": {"pollingIntervalMs": 50, "shutdownDrainTimeoutMs": 1000, "systemDatabasePoolSize": 5}}


def _database_at_schema(url: str, version: int) -> None:
    """A database migrated by DBOS up to `version` only, as an older release of DBOS left it."""
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    every = _migration.get_dbos_migrations
    with mock.patch.object(_migration, "get_dbos_migrations", lambda *a, **k: every(*a, **k)[:version]):
        _migration.ensure_dbos_schema(engine, "dbos")
        _migration.run_dbos_migrations(engine, "dbos", True)
    engine.dispose()


def _app_role(server: LocalPostgres, database: str, *, limit: int = -1, owner: bool = True) -> str:
    """A non-superuser role (the limits of CONNECTION LIMIT apply to it), and its URL to `database`."""
    admin = server.create_database(database)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE app LOGIN PASSWORD 'app-secret-pw' CONNECTION LIMIT {limit}")
        if owner:
            conn.execute(f"ALTER DATABASE {database} OWNER TO app")
    return f"postgresql://app:app-secret-pw@127.0.0.1:{server.port}/{database}"


def test_should_probe_and_migrate_a_database_left_at_an_old_dbos_schema(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, pool_database: str
) -> None:
    _database_at_schema(pool_database, 100)
    with psycopg.connect(pool_database) as conn:
        no_owner_column = conn.execute(
            "SELECT count(*) FROM information_schema.columns WHERE table_schema = 'dbos' "
            "AND table_name = 'queues' AND column_name = 'application_name'"
        ).fetchone()
    assert no_owner_column == (0,) and migrate.current_version(pool_database) == 100
    create_secret(kube_api, kube_namespace, pool_database)
    create_pool(kube_api, kube_namespace, "pool", replicas=1)
    pool = wait_for_condition(kube_api, kube_namespace, "pool", "Ready")
    assert pool["status"]["schemaVersion"] == migrate.required_version() == migrate.current_version(pool_database)
    said = {(e.reason, e.message) for e in list_events(kube_api, kube_namespace)}
    assert "DatabaseUnreachable" not in {reason for reason, _ in said}
    assert ("SchemaCurrent", f"SchemaReady=True: migrated to schema {migrate.required_version()}") in said


def test_should_tell_an_unreachable_database_from_a_failed_query(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, small_postgres: LocalPostgres
) -> None:
    closed = f"postgresql://app:app-secret-pw@127.0.0.1:{free_port()}/nowhere"  # handed out, never bound
    create_secret(kube_api, kube_namespace, closed, name="closed")
    create_pool(kube_api, kube_namespace, "closed", database={"secretRef": {"name": "closed"}})
    url = _app_role(small_postgres, "locked", owner=False)
    admin = small_postgres.url("locked")
    _database_at_schema(admin, 100)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("GRANT CONNECT ON DATABASE locked TO app; GRANT USAGE ON SCHEMA dbos TO app")
    create_secret(kube_api, kube_namespace, url, name="locked")
    create_pool(kube_api, kube_namespace, "locked", database={"secretRef": {"name": "locked"}})
    unreachable = wait_for_condition(kube_api, kube_namespace, "closed", "Degraded")
    assert condition(unreachable, "Degraded")["reason"] == "DatabaseUnreachable"
    assert condition(unreachable, "Degraded")["message"].startswith("cannot reach the database: connection ")
    failed = wait_for_condition(kube_api, kube_namespace, "locked", "Degraded")
    assert condition(failed, "Degraded")["reason"] == "DatabaseQueryFailed"
    assert condition(failed, "Degraded")["message"] == (
        "connected to the database, but a query failed: permission denied for table dbos_migrations"
    )
    assert condition(failed, "Ready")["status"] == "False"
    assert_no_secret(kube_api, kube_namespace, operator, url)


def test_should_share_the_servers_connections_between_pools_on_different_databases(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, small_postgres: LocalPostgres
) -> None:
    for database in ("one", "two"):
        create_secret(kube_api, kube_namespace, small_postgres.create_database(database), name=database)
    spec = {**QUICK, "database": {"secretRef": {"name": "one"}, "reservedConnections": 2}}
    create_pool(kube_api, kube_namespace, "one", replicas=2, **spec)
    first = wait_for_condition(kube_api, kube_namespace, "one", "Ready")
    assert first["status"]["connectionBudget"]["needed"] == 12
    spec = {**QUICK, "database": {"secretRef": {"name": "two"}, "reservedConnections": 2}}
    create_pool(kube_api, kube_namespace, "two", replicas=4, **spec)
    second = wait_for_condition(kube_api, kube_namespace, "two", "ConnectionBudget", "False")
    budget = second["status"]["connectionBudget"]
    assert (budget["otherPools"], budget["limitedBy"], budget["desiredReplicas"]) == (12, "server", 4)
    assert budget["allowedReplicas"] < 4
    # Everything the two pools may hold fits the server, with its reserved slots, headroom and the Job's.
    assert first["status"]["connectionBudget"]["needed"] + budget["needed"] <= 40 - 3 - 2 - 3 - budget["othersInUse"]
    second = wait_for_pool(
        kube_api, kube_namespace, "two", "held, not ready", lambda p: p["status"].get("phase") == "Degraded"
    )
    assert (condition(second, "Ready")["status"], condition(second, "Ready")["reason"]) == ("False", "OverBudget")
    assert condition(second, "Degraded")["reason"] == "OverBudget"


@pytest.mark.parametrize("limit", ["database", "role"])
def test_should_stay_within_the_connection_limit_of_its_database_and_role(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, small_postgres: LocalPostgres, limit: str
) -> None:
    url = _app_role(small_postgres, "limited", limit=16 if limit == "role" else -1)
    if limit == "database":
        with psycopg.connect(small_postgres.url("limited"), autocommit=True) as conn:
            conn.execute("ALTER DATABASE limited CONNECTION LIMIT 16")
    create_secret(kube_api, kube_namespace, url)
    create_pool(
        kube_api,
        kube_namespace,
        "pool",
        replicas=4,
        **QUICK,
        database={"secretRef": {"name": "fireflow-db"}, "reservedConnections": 0},
    )
    pool = wait_for_condition(kube_api, kube_namespace, "pool", "ConnectionBudget", "False")
    budget = pool["status"]["connectionBudget"]
    assert (budget["limitedBy"], budget["perReplica"]) == (limit, 6)
    # 16 - 3 for the migration Job: nothing but the pool and the operator connects as `app` or to `limited`.
    assert budget["allowedReplicas"] == (16 - 3) // 6
    message = condition(pool, "ConnectionBudget")["message"]
    scope = "database 'limited'" if limit == "database" else "role 'app'"
    assert f"but only {budget['allowedReplicas'] * 6} fit: {scope} CONNECTION LIMIT 16 - others in use " in message
    wait_for_pool(
        kube_api,
        kube_namespace,
        "pool",
        "its workers ready",
        lambda p: p["status"].get("readyReplicas") == budget["allowedReplicas"],
    )


def test_should_keep_its_workers_through_a_burst_of_others_connections(
    kube_api: ApiClient, kube_namespace: str, kube_cluster: Any, small_postgres: LocalPostgres
) -> None:
    operator = OperatorProcess(kube_cluster, FIREFLOW_OPERATOR_BUDGET_WINDOW_SECONDS="25").start()
    stop, done = watch.Watch(), threading.Event()
    try:
        url = small_postgres.create_database("burst")
        create_secret(kube_api, kube_namespace, url)
        create_pool(
            kube_api,
            kube_namespace,
            "pool",
            replicas=3,
            **QUICK,
            database={"secretRef": {"name": "fireflow-db"}, "reservedConnections": 2},
        )
        wait_for_condition(kube_api, kube_namespace, "pool", "Ready")
        counts: list[int] = []

        def record() -> None:
            while not done.is_set():
                try:
                    for event in stop.stream(
                        AppsV1Api(kube_api).list_namespaced_stateful_set, kube_namespace, timeout_seconds=600
                    ):
                        # The client yields what the server sent: an ERROR or empty event has no StatefulSet.
                        spec = getattr(event.get("object") if isinstance(event, dict) else None, "spec", None)
                        if spec is not None and spec.replicas is not None:
                            counts.append(int(spec.replicas))
                except urllib3.exceptions.ProtocolError:
                    continue  # the server ended the watch early: watch again (its list shows the current size)

        thread = threading.Thread(target=record, daemon=True)
        thread.start()
        # 40 - 3 reserved - 2 headroom - 3 (Job) = 32: with 16 others only 2 workers of 6 fit, not 3.
        burst = [psycopg.connect(url, application_name="someone-else") for _ in range(16)]
        time.sleep(12)  # two resyncs at 5 s see the burst
        for conn in burst:
            conn.close()
        time.sleep(8)
        assert counts, "the watch recorded nothing"
        assert min(counts) == 3, f"a worker was removed for a passing burst: {counts}"
        lasting = [psycopg.connect(url, application_name="someone-else") for _ in range(16)]
        try:
            pool = wait_for_pool(kube_api, kube_namespace, "pool", "held below 3 once the burst lasts",
                                 lambda p: p["status"].get("desiredReplicas") == 2)  # fmt: skip
            assert condition(pool, "ConnectionBudget")["reason"] == "OverBudget"
        finally:
            for conn in lasting:
                conn.close()
    finally:
        done.set()
        stop.stop()
        operator.stop()


def test_should_abandon_a_migration_that_keeps_failing_with_the_old_version_serving(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, pool_database: str
) -> None:
    create_secret(kube_api, kube_namespace, pool_database)
    create_pool(
        kube_api, kube_namespace, "pool", replicas=2, migration={"lockTimeoutMs": 300, "retries": 0, "maxAttempts": 2}
    )
    wait_for_condition(kube_api, kube_namespace, "pool", "Ready")
    set_schema_behind(pool_database)
    holder = psycopg.connect(pool_database)
    holder.execute("LOCK TABLE dbos.workflow_status IN ACCESS SHARE MODE")
    patch_pool(kube_api, kube_namespace, "pool", {"image": "fireflow-worker:2"})
    pool = wait_for_pool(kube_api, kube_namespace, "pool", "abandoned",
                         lambda p: condition(p, "SchemaReady").get("reason") == "MigrationAbandoned")  # fmt: skip
    message = condition(pool, "SchemaReady")["message"]
    assert message.startswith("migration attempt 2 of 2 failed: lock timeout: ")
    assert message.endswith("abandoned until spec.image, spec.dbos.applicationVersion or spec.migration changes")
    assert (pool["status"]["phase"], pool["status"]["phaseReason"]) == ("Degraded", "MigrationAbandoned")
    wait_until(
        "the old version back at its size",
        lambda: AppsV1Api(kube_api).read_namespaced_stateful_set("pool", kube_namespace).spec.replicas == 2,
    )
    holder.close()
    time.sleep(10)  # nothing more is tried until the spec changes
    jobs = BatchV1Api(kube_api).list_namespaced_job(kube_namespace).items
    assert [j.status.failed for j in jobs] == [1], "only the newest failed Job is kept"
    assert condition(get_pool(kube_api, kube_namespace, "pool"), "SchemaReady")["reason"] == "MigrationAbandoned"
    patch_pool(kube_api, kube_namespace, "pool", {"migration": {"lockTimeoutMs": 2000}})
    wait_for_pool(kube_api, kube_namespace, "pool", "the rollout", rolled_out("fireflow-worker:2"))


def _pending_runs(url: str, namespace: str) -> list[tuple[str, str]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT workflow_uuid, status FROM dbos.workflow_status "
            "WHERE executor_id LIKE %s AND status IN ('PENDING', 'ENQUEUED')",
            (f"{namespace}.pool-%",),
        ).fetchall()
    return [(str(r[0]), str(r[1])) for r in rows]


def _busy_pool(api: ApiClient, namespace: str, url: str) -> list[str]:
    """A pool of two with runs in flight that outlast the drain."""
    create_secret(api, namespace, url)
    create_pool(api, namespace, "pool", replicas=2, **QUICK)
    wait_for_condition(api, namespace, "pool", "Ready")
    with FireflowClient(url) as client:
        runs = [client.enqueue(NAP) for _ in range(4)]
    wait_until(
        "runs claimed",
        lambda: (
            all(s == "PENDING" for _, s in _pending_runs(url, namespace)) and len(_pending_runs(url, namespace)) == 4
        ),
    )
    return runs


def _statuses(url: str, runs: list[str]) -> dict[str, tuple[str, str | None]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT workflow_uuid, status, executor_id FROM dbos.workflow_status WHERE workflow_uuid = ANY(%s)", (runs,)
        ).fetchall()
    return {str(r[0]): (str(r[1]), r[2]) for r in rows}


def test_should_hand_back_the_runs_when_the_pool_and_its_secret_go_together(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, pool_database: str
) -> None:
    runs = _busy_pool(kube_api, kube_namespace, pool_database)
    CoreV1Api(kube_api).delete_namespaced_secret("fireflow-db", kube_namespace)
    CustomObjectsApi(kube_api).delete_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, "pool")
    wait_until("the pool gone", lambda: pool_gone(kube_api, kube_namespace))
    statuses = _statuses(pool_database, runs)
    assert {s for s, _ in statuses.values()} == {"ENQUEUED"}, statuses  # back on the queue for any worker
    assert not CoreV1Api(kube_api).list_namespaced_secret(kube_namespace).items  # the copy went with the pool


def test_should_hand_back_the_runs_when_the_namespace_is_deleted(
    kube_api: ApiClient, kube_cluster: Any, operator: OperatorProcess, pool_database: str
) -> None:
    with fresh_namespace(kube_cluster, f"doomed-{int(time.time())}") as namespace:
        runs = _busy_pool(kube_api, namespace, pool_database)
        CoreV1Api(kube_api).delete_namespace(namespace)

        def namespace_gone() -> bool:
            try:
                CoreV1Api(kube_api).read_namespace(namespace)
            except ApiException as err:
                return bool(err.status == 404)
            return False

        wait_until("the namespace gone", namespace_gone, timeout=300)
    statuses = _statuses(pool_database, runs)
    assert {s for s, _ in statuses.values()} == {"ENQUEUED"}, statuses


def test_should_say_what_to_do_when_the_runs_cannot_be_reached(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, pool_database: str
) -> None:
    runs = _busy_pool(kube_api, kube_namespace, pool_database)
    core = CoreV1Api(kube_api)
    core.patch_namespaced_secret("pool-connection", kube_namespace, {"metadata": {"finalizers": None}})
    core.delete_namespaced_secret("pool-connection", kube_namespace)
    core.delete_namespaced_secret("fireflow-db", kube_namespace)
    CustomObjectsApi(kube_api).delete_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, "pool")
    pool = wait_for_pool(
        kube_api,
        kube_namespace,
        "pool",
        "blocked",
        lambda p: condition(p, "Degraded").get("reason") == "RunsNotRecovered",
    )
    message = condition(pool, "Degraded")["message"]
    assert message == (
        f"cannot hand back the PENDING runs of pool 'pool': Secret 'fireflow-db' and the operator's copy "
        f"'pool-connection' are both gone. Recreate Secret 'fireflow-db' in namespace {kube_namespace} with the "
        f"database URL to let the finalizer finish, or abandon the runs with: kubectl -n {kube_namespace} patch "
        f'fireflowworkerpool pool --type=json -p=\'[{{"op":"remove","path":"/metadata/finalizers"}}]\''
    )
    wait_until(
        "a Warning event",
        lambda: any(
            e.reason == "RunsNotRecovered" and e.type == "Warning" for e in list_events(kube_api, kube_namespace)
        ),
    )
    # The series the FireflowRunsNotRecovered alert reads, while the finalizer waits and not once the pool went.
    blocked = {"namespace": kube_namespace, "pool": "pool", "type": "Degraded", "reason": "RunsNotRecovered"}
    wait_until("the blocked series", lambda: _pool_condition_series(operator, kube_namespace).get(_key(blocked)) == 1)
    assert {s for s, _ in _statuses(pool_database, runs).values()} == {"PENDING"}  # nothing lost meanwhile
    create_secret(kube_api, kube_namespace, pool_database)
    wait_until("the pool gone", lambda: pool_gone(kube_api, kube_namespace), timeout=120)
    assert {s for s, _ in _statuses(pool_database, runs).values()} == {"ENQUEUED"}
    wait_until("the pool's series gone", lambda: not _pool_condition_series(operator, kube_namespace))


def _key(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def _pool_condition_series(operator: OperatorProcess, namespace: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The operator's fireflow_operator_pool_condition samples of pools in `namespace`, scraped from its port."""
    port = operator.environment["FIREFLOW_OPERATOR_METRICS_PORT"]
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {
        _key(sample.labels): sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "fireflow_operator_pool_condition"
        for sample in family.samples
        if sample.labels.get("namespace") == namespace
    }
