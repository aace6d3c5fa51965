"""Two operators sharding one namespace's pools by label (FIREFLOW_OPERATOR_POOL_SELECTOR), against the real
control plane: each reconciles and finalizes only its own pools under its own finalizer, an unlabelled pool is
left alone, a database is never shared across shards, a relabel moves a pool, and a pool holding another
install's finalizer is still let go."""

from __future__ import annotations

import time
from typing import Any

from kubernetes.client import ApiClient, CustomObjectsApi

from fireflow_operator.api import names
from fireflow_operator.api.model import GROUP, PLURAL, VERSION
from tests.kube.cluster import Cluster
from tests.support.pools import (
    OperatorProcess,
    condition,
    create_secret,
    get_pool,
    pool_body,
    pool_gone,
    wait_for_condition,
    wait_for_pool,
    wait_until,
)

SHARD_A, SHARD_B = names.pool_finalizer({"shard": "a"}), names.pool_finalizer({"shard": "b"})


def _shard(cluster: Cluster, namespace: str, selector: str) -> OperatorProcess:
    return OperatorProcess(
        cluster, FIREFLOW_OPERATOR_NAMESPACES=namespace, FIREFLOW_OPERATOR_POOL_SELECTOR=selector
    ).start()


def _create(api: ApiClient, namespace: str, name: str, labels: dict[str, str]) -> None:
    body = pool_body(name)
    body["metadata"]["labels"] = labels
    CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


def _metadata_patch(api: ApiClient, namespace: str, name: str, metadata: dict[str, Any]) -> None:
    CustomObjectsApi(api).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name, {"metadata": metadata}
    )


def _finalizers(api: ApiClient, namespace: str, name: str) -> list[str]:
    return list(get_pool(api, namespace, name)["metadata"].get("finalizers") or [])


def test_should_shard_pools_by_label_with_one_finalizer_per_shard_and_one_shard_per_database(
    kube_api: ApiClient, kube_namespace: str, kube_cluster: Cluster, pool_database: str
) -> None:
    shard_a = _shard(kube_cluster, kube_namespace, "shard=a")
    shard_b = _shard(kube_cluster, kube_namespace, "shard=b")
    try:
        create_secret(kube_api, kube_namespace, pool_database)
        _create(kube_api, kube_namespace, "pool-a", {"shard": "a"})
        wait_for_condition(kube_api, kube_namespace, "pool-a", "Ready")
        # Shard b's pool on shard a's database is refused, not rolled out beside it.
        _create(kube_api, kube_namespace, "pool-b", {"shard": "b"})
        refused = wait_for_pool(
            kube_api, kube_namespace, "pool-b", "the shard conflict",
            lambda p: condition(p, "Degraded").get("reason") == "DatabaseSharedAcrossShards",
        )  # fmt: skip
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

        # A relabel moves pool-b to shard a: the database is no longer shared across shards.
        _metadata_patch(kube_api, kube_namespace, "pool-b", {"labels": {"shard": "a"}})
        wait_until("pool-b held by shard a alone", lambda: _finalizers(kube_api, kube_namespace, "pool-b") == [SHARD_A])
        wait_for_condition(kube_api, kube_namespace, "pool-b", "Ready")

        # A finalizer left by an earlier unsharded install does not keep a deleted pool forever.
        _metadata_patch(kube_api, kube_namespace, "pool-b", {"finalizers": [SHARD_A, names.FINALIZER]})
        for pool in ("pool-a", "pool-b", "pool-none"):
            CustomObjectsApi(kube_api).delete_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, pool)
        wait_until("every pool gone", lambda: all(pool_gone(kube_api, kube_namespace, p) for p in ("pool-a", "pool-b")))
        assert pool_gone(kube_api, kube_namespace, "pool-none")
    finally:
        for shard in (shard_a, shard_b):
            shard.stop()
        print(shard_a.output()[-10_000:], shard_b.output()[-10_000:])
