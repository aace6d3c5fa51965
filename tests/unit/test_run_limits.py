"""The per-run limits and the cancel watcher's bookkeeping, without a database (the worker tests run them
against a real one)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

import pytest

from fireflow_worker.cancellation import CancelWatcher
from fireflow_worker.flows.graph import resolve_params
from fireflow_worker.flows.limits import json_bytes
from fireflow_worker.flows.nodetype import NodeContext, NodeError, parse_params, run_node_sized
from fireflow_worker.flows.registry import default_registry
from fireflow_worker.run_limits import OutputBudget, RunLimits, checked_output_size


def test_should_measure_an_output_and_refuse_one_too_big_or_too_deep() -> None:
    limits = RunLimits(max_node_output_bytes=1024)
    assert checked_output_size({"a": "é"}, limits) == len('{"a":"é"}'.encode())
    with pytest.raises(NodeError, match=r"the output is 1\.96 KiB, more than the 1 KiB a node may produce") as big:
        checked_output_size("x" * 2000, limits)
    assert big.value.retryable is False
    deep: Any = 1
    for _ in range(100):
        deep = [deep]
    with pytest.raises(NodeError, match="the output is nested more than 64 levels deep"):
        checked_output_size(deep, limits)
    # At the limit and measured beforehand (as a node's attempt measures it): accepted.
    at_limit: Any = 1
    for _ in range(64):
        at_limit = [at_limit]
    assert checked_output_size(at_limit, limits, json_bytes(at_limit)) == 129


def test_should_say_an_output_nested_past_the_encoder_is_too_deep_not_a_recursion_error() -> None:
    deep: Any = "bottom"
    for _ in range(20_000):
        deep = {"down": deep}
    transform = default_registry().get("transform")
    params = parse_params(transform, {"value": deep})
    with pytest.raises(NodeError, match=r"the output is nested more than 64 levels deep \(the limit is 64\)"):
        run_node_sized(transform, params, NodeContext(run_id="r", node_id="n", sleeper=lambda _seconds: None))


def test_should_let_concurrent_nodes_take_no_more_than_the_run_total() -> None:
    budget = OutputBudget(limit_bytes=10_000)
    refused: list[str] = []

    def reserve(node_id: str) -> None:
        try:
            budget.reserve(node_id, 1_000)
        except NodeError:
            refused.append(node_id)

    threads = [threading.Thread(target=reserve, args=(f"n{i}",)) for i in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert (budget.used, len(refused)) == (10_000, 40)
    budget.record("n0", 99_999)  # already counted: a replay does not count it twice
    budget.record("replayed", 5_000)  # recorded by an earlier execution: counted whatever its size
    assert budget.used == 15_000


def test_should_refuse_params_whose_references_resolve_to_too_much_before_building_them() -> None:
    outputs = {"big": "x" * 3000}
    params = {"template": "${nodes.big}" * 100}
    with pytest.raises(NodeError, match=r"resolve to more than 4\.88 KiB of data \(FIREFLOW_MAX_NODE_OUTPUT_BYTES\)"):
        resolve_params(params, {}, outputs, max_bytes=5000)
    assert resolve_params({"template": "${nodes.big}"}, {}, outputs, max_bytes=5000) == {"template": "x" * 3000}


def test_should_wake_a_watched_run_once_it_is_cancelled_and_remember_it() -> None:
    cancelled: set[str] = set()
    asked: list[list[str]] = []

    def cancelled_among(run_ids: Sequence[str]) -> set[str]:
        asked.append(sorted(run_ids))
        return cancelled & set(run_ids)

    watcher = CancelWatcher(cancelled_among)

    async def scenario() -> list[str]:
        woken: list[str] = []
        watcher.watch("a", lambda: woken.append("a"))
        watcher.watch("b", lambda: woken.append("b"))
        await asyncio.to_thread(watcher.poll_once)
        cancelled.add("b")
        await asyncio.to_thread(watcher.poll_once)
        await asyncio.sleep(0)  # the wake-up is scheduled on this loop
        watcher.unwatch("a")
        await asyncio.to_thread(watcher.poll_once)
        return woken

    assert asyncio.run(scenario()) == ["b"]
    assert asked == [["a", "b"], ["a", "b"]]  # nothing watched any more: the third poll asks nothing
    assert watcher.is_cancelled("b") and not watcher.is_cancelled("a")
    cancelled.add("c")
    assert not watcher.is_cancelled("c")
    assert watcher.is_cancelled("c", ask_now=True)
