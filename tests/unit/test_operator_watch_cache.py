"""What the operator keeps from kopf's watches (pure, no cluster): the pools' index and the children's cache,
ordered by resourceVersion, filled by one LIST, cleared of what a LIST no longer has; the work queue's order."""

from __future__ import annotations

import asyncio
from typing import Any

from fireflow_operator.api import names
from fireflow_operator.kube import changed_paths, merge_patch
from fireflow_operator.pool_index import ObjectIndex, PoolIndex
from fireflow_operator.watch_cache import JOBS, PODS, STATEFULSETS, WatchCache
from fireflow_operator.workqueue import PRIORITY, ReconcileQueue


def _body(name: str, version: int, namespace: str = "ns", pool: str = "pool", **labels: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "resourceVersion": str(version),
            "labels": {**names.common_labels(pool, names.WORKER_COMPONENT), **labels},
        }
    }


def test_should_tell_a_new_version_from_a_repeated_or_older_one() -> None:
    index = ObjectIndex()
    assert index.observe(_body("a", 5))
    assert not index.observe(_body("a", 5))  # a watch's re-list, or the echo of the operator's own write
    assert not index.observe(_body("a", 4))
    assert index.observe(_body("a", 6))
    assert index.observe(_body("a", 7), deleted=True)
    assert not index.observe(_body("a", 6))  # older than its deletion: stays deleted
    assert index.get("ns", "a") is None and index.gone("ns", "a")


def test_should_drop_what_a_later_list_no_longer_has_but_keep_what_came_after_it() -> None:
    index = ObjectIndex(relist_seconds=0)
    index.fill(lambda: [_body("ghost", 3), _body("kept", 4)])
    index.observe(_body("late", 9))  # created after the LIST below started
    index.fill(lambda: [_body("kept", 4), _body("other", 8)])  # "ghost" went while no watch saw it
    assert sorted(body["metadata"]["name"] for body in index.values()) == ["kept", "late", "other"]


def test_should_list_each_kind_once_and_then_follow_the_watch() -> None:
    listed: list[str] = []

    def sts(version: int) -> dict[str, Any]:
        return {**_body("pool", version), "spec": {"selector": {"matchLabels": {}}, "template": {}, "replicas": 1}}

    def list_kind(kind: str) -> list[dict[str, Any]]:
        listed.append(kind)
        return [sts(3)] if kind == STATEFULSETS else []

    cache = WatchCache(list_kind)
    first = cache[STATEFULSETS].get("ns", "pool")
    assert first is not None and first.metadata.resource_version == "3"
    assert cache[STATEFULSETS].get("ns", "pool") is first  # one model per resourceVersion, built once
    assert cache.observe(STATEFULSETS, sts(4))
    second = cache[STATEFULSETS].get("ns", "pool")
    assert second is not None and second.metadata.resource_version == "4"
    assert cache[PODS].of_pool("ns", "pool") == []
    assert listed == [STATEFULSETS, PODS]


def test_should_find_a_pools_children_by_their_labels_and_forget_deleted_ones() -> None:
    cache = WatchCache(lambda kind: [])
    cache.observe(PODS, _body("pool-0", 5))
    cache.observe(PODS, _body("pool-1", 6))
    cache.observe(PODS, _body("other-0", 7, pool="other"))
    cache.observe(PODS, _body("pool-0", 8), deleted=True)
    assert [p.metadata.name for p in cache[PODS].of_pool("ns", "pool", names.selector_labels("pool"))] == ["pool-1"]
    job = _body("pool-plan", 9, **{names.LABEL_DATABASE: "db-1", names.LABEL_COMPONENT: "migration-apply"})
    cache.observe(JOBS, job)
    wanted = {names.LABEL_DATABASE: "db-1", names.LABEL_COMPONENT: "migration-apply"}
    assert [j.metadata.name for j in cache[JOBS].matching(wanted)] == ["pool-plan"]
    assert cache[JOBS].matching(wanted, ["elsewhere"]) == []
    cache.forget(JOBS, "ns", "pool-plan")
    assert cache[JOBS].matching(wanted) == []
    assert not cache.observe(JOBS, job)  # an older event of the deleted Job does not bring it back


def test_should_name_what_a_status_patch_changes() -> None:
    old = {"phase": "Running", "migration": {"phase": "Done", "attempt": 1}, "replicas": 1}
    new = {"phase": "Running", "migration": {"phase": "Done"}, "replicas": 2}
    assert changed_paths(merge_patch(old, new)) == ["migration.attempt (removed)", "replicas"]


def test_should_reconcile_a_spec_change_before_waiting_resyncs_and_each_pool_once() -> None:
    started: list[tuple[str, int]] = []

    async def scenario() -> None:
        gate = asyncio.Event()

        async def run(key: tuple[str, str], priority: int) -> None:
            started.append((key[1], priority))
            if key[1] == "busy":
                await gate.wait()

        queue = ReconcileQueue(run, workers=1)
        busy = asyncio.create_task(queue.request(("ns", "busy"), PRIORITY["timer"]))
        await asyncio.sleep(0)
        waiting = [asyncio.create_task(queue.request(("ns", f"r{i}"), PRIORITY["timer"])) for i in range(3)]
        again = asyncio.create_task(queue.request(("ns", "r1"), PRIORITY["child"]))  # joins r1, more urgent
        change = asyncio.create_task(queue.request(("ns", "changed"), PRIORITY["pool"]))
        await asyncio.sleep(0)
        gate.set()
        await asyncio.gather(busy, *waiting, again, change)

    asyncio.run(scenario())
    assert started == [("busy", 2), ("changed", 0), ("r1", 1), ("r0", 2), ("r2", 2)]


def test_should_derive_a_view_of_the_fleet_once_until_a_pool_changes() -> None:
    index = PoolIndex()
    index.fill(lambda: [_body("a", 1), _body("b", 2)])
    built: list[int] = []

    def names_of(pools: list[dict[str, Any]]) -> list[str]:
        built.append(len(pools))
        return sorted(p["metadata"]["name"] for p in pools)

    assert index.derived("names", names_of) == ["a", "b"]
    assert index.derived("names", names_of) == ["a", "b"]
    assert not index.observe(_body("a", 1))  # a repeat changes nothing
    assert index.derived("names", names_of) == ["a", "b"]
    index.observe(_body("c", 3))
    assert index.derived("names", names_of) == ["a", "b", "c"]
    assert built == [2, 3]
