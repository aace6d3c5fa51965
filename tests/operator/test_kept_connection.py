"""The operator's database connections, against the real control plane and PostgreSQL: an idle ready pool is
looked at over several resyncs through one kept connection (the same server backend before and after), instead
of new ones opened for every reconcile."""

from __future__ import annotations

import psycopg
from kubernetes.client import ApiClient

from fireflow_operator.api.names import OPERATOR_APPLICATION_NAME
from tests.support.pools import OperatorProcess, create_pool, create_secret, wait_for_condition, wait_until

RESYNCS = 4  # the test operator's timer runs every 5 s


def _operator_backends(url: str) -> set[tuple[int, str]]:
    """(pid, backend_start) of the operator's connections to the pool's database (a fresh database per test)."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT pid, backend_start::text FROM pg_stat_activity "
            "WHERE application_name = %s AND datname = current_database()",
            (OPERATOR_APPLICATION_NAME,),
        ).fetchall()
    return {(int(pid), str(start)) for pid, start in rows}


def test_should_look_at_an_idle_pool_through_one_kept_connection(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, pool_database: str
) -> None:
    create_secret(kube_api, kube_namespace, pool_database)
    create_pool(kube_api, kube_namespace, "pool", replicas=1)
    wait_for_condition(kube_api, kube_namespace, "pool", "Ready")
    before = wait_until("the operator's kept connection", lambda: _operator_backends(pool_database))
    seen = len(operator.output())
    wait_until(f"{RESYNCS} resyncs",
               lambda: operator.output()[seen:].count("Timer 'pool_resync' succeeded") >= RESYNCS)  # fmt: skip
    after = _operator_backends(pool_database)
    assert len(before) == 1, before  # at rest, between reconciles: one connection, kept
    assert after == before, (before, after)  # the same backend served every reconcile of the window
