"""Two operators sharding one namespace's pools by label (FIREFLOW_OPERATOR_POOL_SELECTOR), against the real
control plane: each reconciles and finalizes only its own pools under its own finalizer, an unlabelled pool is
left alone, a PostgreSQL server is never shared across shards (the older pool stands), a relabel moves a pool
and the shard it left forgets it, another shard's children cost an operator no request, a pool holding another
install's finalizer is still let go, and two operators selecting one pool are reported."""

from __future__ import annotations

import re
import time
import urllib.request
from typing import Any

from kubernetes.client import ApiClient, CustomObjectsApi

from fireflow_local.postgres import LocalPostgres
from fireflow_operator.api import names
from fireflow_operator.api.model import GROUP, PLURAL, VERSION
from tests.kube.cluster import Cluster
from tests.support.pools import (
    OperatorProcess,
    condition,
    create_secret,
    get_pool,
    list_events,
    pool_body,
    pool_gone,
    wait_for_condition,
    wait_for_pool,
    wait_until,
)

SHARD_A, SHARD_B = names.pool_finalizer({"shard": "a"}), names.pool_finalizer({"shard": "b"})


def _shard(cluster: Cluster, namespace: str, selector: str, **env: str) -> OperatorProcess:
    return OperatorProcess(
        cluster, FIREFLOW_OPERATOR_NAMESPACES=namespace, FIREFLOW_OPERATOR_POOL_SELECTOR=selector, **env
    ).start()


def _create(api: ApiClient, namespace: str, name: str, labels: dict[str, str], secret: str = "fireflow-db") -> None:
    body = pool_body(name, database={"secretRef": {"name": secret}})
    body["metadata"]["labels"] = labels
    CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


def _series_of(operator: OperatorProcess, pool: str) -> list[str]:
    """The operator's metric lines about `pool`."""
    port = operator.environment["FIREFLOW_OPERATOR_METRICS_PORT"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return [line for line in text.splitlines() if f'pool="{pool}"' in line]


def _refused(pool: dict[str, Any]) -> bool:
    return condition(pool, "Degraded").get("reason") == "ServerSharedAcrossShards"


def _metadata_patch(api: ApiClient, namespace: str, name: str, metadata: dict[str, Any]) -> None:
    CustomObjectsApi(api).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name, {"metadata": metadata}
    )


def _finalizers(api: ApiClient, namespace: str, name: str) -> list[str]:
    return list(get_pool(api, namespace, name)["metadata"].get("finalizers") or [])


def test_should_shard_pools_by_label_with_one_finalizer_per_shard_and_one_shard_per_server(
    kube_api: ApiClient, kube_namespace: str, kube_cluster: Cluster, pool_database: str, postgres: LocalPostgres
) -> None:
    shard_a = _shard(kube_cluster, kube_namespace, "shard=a")
    # At DEBUG, its client logs every request line: another shard's pools must cost it none.
    shard_b = _shard(kube_cluster, kube_namespace, "shard=b", FIREFLOW_OPERATOR_LOG_LEVEL="DEBUG")
    try:
        create_secret(kube_api, kube_namespace, pool_database)
        create_secret(kube_api, kube_namespace, postgres.create_database(f"t_{time.time_ns()}"), "other-db")
        _create(kube_api, kube_namespace, "pool-a", {"shard": "a"})
        wait_for_condition(kube_api, kube_namespace, "pool-a", "Ready")
        # Shard b's pool on another database of shard a's server is refused, not rolled out beside it.
        _create(kube_api, kube_namespace, "pool-b", {"shard": "b"}, secret="other-db")
        refused = wait_for_pool(kube_api, kube_namespace, "pool-b", "the shard conflict", _refused)
        assert "pool-a" in condition(refused, "Degraded")["message"]
        _create(kube_api, kube_namespace, "pool-none", {})
        wait_until("each shard's finalizer on its pool", lambda: _finalizers(kube_api, kube_namespace, "pool-b"))
        # Held for a while: kopf drops its finalizer from pools it does not select, so a shared name would flap.
        for _ in range(3):
            assert _finalizers(kube_api, kube_namespace, "pool-a") == [SHARD_A]
            assert _finalizers(kube_api, kube_namespace, "pool-b") == [SHARD_B]
            time.sleep(2)  # a resync or two (FIREFLOW_OPERATOR_RESYNC_SECONDS=5 in tests)
        untouched = get_pool(kube_api, kube_namespace, "pool-none")
        assert not untouched["metadata"].get("finalizers") and not untouched.get("status")

        # A relabel moves pool-b to shard a: the server is no longer shared across shards.
        _metadata_patch(kube_api, kube_namespace, "pool-b", {"labels": {"shard": "a"}})
        wait_until("pool-b held by shard a alone", lambda: _finalizers(kube_api, kube_namespace, "pool-b") == [SHARD_A])
        wait_for_condition(kube_api, kube_namespace, "pool-b", "Ready")
        wait_until("shard a's series of pool-b", lambda: _series_of(shard_a, "pool-b"))

        # Back to shard b, now a running pool with a budget on the server: the younger pool-b is refused, the
        # older pool-a stands, and shard a forgets pool-b (no stale series).
        _metadata_patch(kube_api, kube_namespace, "pool-b", {"labels": {"shard": "b"}})
        wait_for_pool(kube_api, kube_namespace, "pool-b", "refused again", _refused)
        wait_until("shard a forgets pool-b", lambda: not _series_of(shard_a, "pool-b"))
        seen = len(shard_a.output())
        wait_until("two resyncs of pool-a", lambda: shard_a.output()[seen:].count("Timer 'pool_resync' succeeded") >= 2)
        pool_a = get_pool(kube_api, kube_namespace, "pool-a")
        assert condition(pool_a, "Ready").get("status") == "True" and not _refused(pool_a), condition(
            pool_a, "Degraded"
        )

        # A finalizer left by an earlier unsharded install does not keep a deleted pool forever.
        _metadata_patch(kube_api, kube_namespace, "pool-b", {"finalizers": [SHARD_B, names.FINALIZER]})
        for pool in ("pool-a", "pool-b", "pool-none"):
            CustomObjectsApi(kube_api).delete_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, pool)
        wait_until("every pool gone", lambda: all(pool_gone(kube_api, kube_namespace, p) for p in ("pool-a", "pool-b")))
        assert pool_gone(kube_api, kube_namespace, "pool-none")
        # Moves between shards are no overlap; and shard b never read pool-a, however often its children changed.
        assert [e.message for e in list_events(kube_api, kube_namespace) if e.reason == "SelectedByTwoOperators"] == []
        pool_a_url = f"/apis/{GROUP}/{VERSION}/namespaces/{kube_namespace}/{PLURAL}/pool-a"
        requests = re.findall(r'"(GET|PATCH|PUT|POST|DELETE) (\S+) HTTP/1.1"', shard_b.output())
        assert any(url.endswith("/pool-b") for _, url in requests), "no request line of shard b: the check is blind"
        assert [r for r in requests if r[1].split("?")[0] == pool_a_url] == []
    finally:
        for shard in (shard_a, shard_b):
            shard.stop()
        print(shard_a.output()[-10_000:], shard_b.output()[-10_000:])


def test_should_report_a_pool_that_an_unsharded_operator_reconciles_beside_its_shard(
    kube_api: ApiClient, kube_namespace: str, kube_cluster: Cluster, pool_database: str
) -> None:
    shard_a = _shard(kube_cluster, kube_namespace, "shard=a")
    everything = OperatorProcess(kube_cluster, FIREFLOW_OPERATOR_NAMESPACES=kube_namespace).start()
    try:
        create_secret(kube_api, kube_namespace, pool_database)
        _create(kube_api, kube_namespace, "pool", {"shard": "a"})

        def reported() -> list[str]:
            events = list_events(kube_api, kube_namespace)
            return [str(e.message) for e in events if e.reason == "SelectedByTwoOperators"]

        messages = wait_until("the overlap reported", reported)
        assert any("FIREFLOW_OPERATOR_POOL_SELECTOR: every pool" in m for m in messages), messages
        assert any("give the releases disjoint poolSelector" in m for m in messages), messages
    finally:
        shard_a.stop()
        everything.stop()
        CustomObjectsApi(kube_api).delete_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, "pool")
        print(shard_a.output()[-5_000:], everything.output()[-5_000:])
