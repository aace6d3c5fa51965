"""Worker processes per pod (their count and executor ids), the settings of claiming and polling, and the
cache of flow plans."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from fireflow_contract.executor_ids import MAX_PROCESSES, child_executor_id
from fireflow_worker.config import ConfigError, load_config
from fireflow_worker.flow_plans import PlanCache, build_plan
from fireflow_worker.flows.validate import FlowValidationError
from fireflow_worker.processes import cgroup_cpu_limit, default_processes
from fireflow_worker.supervisor import Child

URL = "postgresql://u:p@127.0.0.1:5432/db"


@pytest.mark.parametrize(
    ("cpu_max", "quota", "period", "cores"),
    [
        ("max 100000\n", None, None, None),  # cgroup v2, no limit
        ("150000 100000\n", None, None, 1.5),
        ("50000 100000", None, None, 0.5),
        (None, "-1", "100000", None),  # cgroup v1, no limit
        (None, "200000\n", "100000\n", 2.0),
        (None, None, None, None),  # not readable
        ("garbage", None, None, None),
        (None, "x", "100000", None),
    ],
)
def test_should_read_the_cpu_limit_of_either_cgroup_version(
    cpu_max: str | None, quota: str | None, period: str | None, cores: float | None
) -> None:
    assert cgroup_cpu_limit(cpu_max, quota, period) == cores


def test_should_default_to_at_least_one_process_and_at_most_the_cap() -> None:
    # Here: whatever this machine's cgroup says (one when there is no CPU limit); never more than the cap.
    assert 1 <= default_processes() <= MAX_PROCESSES


def test_should_name_process_k_after_the_pod() -> None:
    assert child_executor_id("team-a.workers-3", 0) == "team-a.workers-3"
    assert child_executor_id("team-a.workers-3", 1) == "team-a.workers-3-p1"
    assert child_executor_id("team-a.workers-3", 12) == "team-a.workers-3-p12"
    assert child_executor_id(None, 0) is None
    assert child_executor_id(None, 2) == "local-p2"


def _config(**env: str) -> Any:
    return load_config({"DATABASE_URL_EXECUTIONS": URL, **env})


def test_should_read_the_process_count_auto_or_a_number() -> None:
    assert _config(FIREFLOW_WORKER_PROCESSES="3").processes == 3
    assert _config(FIREFLOW_WORKER_PROCESSES="auto").processes == default_processes()
    assert _config().processes == default_processes()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"FIREFLOW_WORKER_PROCESSES": "0"},
            "invalid FIREFLOW_WORKER_PROCESSES='0': Input should be greater than or equal to 1; "
            "accepted: auto or an integer from 1 to 64",
        ),
        ({"FIREFLOW_WORKER_PROCESSES": "65"}, "accepted: auto or an integer from 1 to 64"),
        ({"FIREFLOW_WORKER_PROCESSES": "two"}, "accepted: auto or an integer from 1 to 64"),
        ({"FIREFLOW_IDLE_POLL_INTERVAL_MS": "5"}, "accepted: an integer from 10 to 600000"),
        ({"FIREFLOW_SANDBOX_QUEUE_POLLING_INTERVAL_MS": "0"}, "accepted: an integer from 1 to 600000"),
        ({"FIREFLOW_CLAIM_ON_NOTIFY": "maybe"}, "accepted: true or false"),
        ({"FIREFLOW_POOL_PRE_PING": "2"}, "accepted: true or false"),
        (
            {"FIREFLOW_WORKER_ID": "w" * 253, "FIREFLOW_WORKER_PROCESSES": "2"},
            "FIREFLOW_WORKER_ID is too long for 2 processes",
        ),
    ],
)
def test_should_refuse_bad_process_and_polling_settings_with_one_line(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _config(**env)


def test_should_poll_each_queue_at_its_own_interval_defaulting_to_the_executions_one() -> None:
    config = _config(DBOS_QUEUE_POLLING_INTERVAL_MS="40", FIREFLOW_TERMINAL_QUEUE_POLLING_INTERVAL_MS="1000")
    assert config.polling_intervals_ms == {
        "fireflow-executions": 40,
        "fireflow-executions-background": 40,
        "fireflow-sandbox": 40,
        "fireflow-terminal": 1000,
    }
    assert (config.claim_on_notify, config.idle_poll_interval_ms, config.pool_pre_ping) == (True, 5000, False)
    assert config.listens_for_work
    local = load_config({"FIREFLOW_LOCAL_MODE": "true"})
    assert not local.listens_for_work  # SQLite has no LISTEN: DBOS polls


FLOW = {"name": "f", "nodes": {"a": {"type": "template", "params": {"template": "x"}}}}


def _copy(flow: dict[str, Any]) -> dict[str, Any]:
    copied: dict[str, Any] = json.loads(json.dumps(flow))
    return copied


def test_should_build_a_plan_once_per_distinct_flow() -> None:
    cache = PlanCache()
    first = cache.get(_copy(FLOW))
    assert cache.get(_copy(FLOW)) is first  # an equal flow of another run: the same plan
    changed = _copy(FLOW)
    changed["nodes"]["a"]["params"]["template"] = "y"
    assert cache.get(changed) is not first
    assert (cache.hits, cache.misses) == (1, 2)
    assert first.is_chain and first.order == ("a",) and first.outputs == ("a",)


def test_should_plan_branches_as_a_graph_and_a_line_as_a_chain() -> None:
    fan = {
        "name": "fan",
        "nodes": {
            "a": {"type": "template", "params": {"template": "a"}},
            "b": {"type": "template", "params": {"template": "b"}},
            "c": {"type": "template", "params": {"template": "${nodes.a}${nodes.b}"}},
        },
    }
    plan = build_plan(fan)
    assert not plan.is_chain
    assert plan.order[-1] == "c" and plan.deps["c"] == ("a", "b")


def test_should_never_cache_an_invalid_flow_and_fail_it_every_time() -> None:
    cache = PlanCache()
    bad = {"name": "bad", "nodes": {"a": {"type": "nope"}}}
    for _ in range(2):
        with pytest.raises(FlowValidationError, match="unknown node type 'nope'"):
            cache.get(_copy(bad))
    assert cache.misses == 2 and cache.hits == 0


def test_should_keep_the_cache_bounded_in_entries_and_size() -> None:
    cache = PlanCache(max_plans=3, max_chars=10_000)
    flows = []
    for index in range(5):
        flow = _copy(FLOW)
        flow["name"] = f"f{index}"
        flows.append(flow)
        cache.get(flow)
    assert len(cache._plans) == 3
    cache.get(_copy(flows[0]))  # evicted: built again
    assert cache.misses == 6
    big = _copy(FLOW)
    big["description"] = "d" * 20_000  # larger than the whole cache: used, never kept
    cache.get(big)
    assert all("d" * 100 not in key for key in cache._plans)


def test_should_learn_a_processs_health_port_from_its_pipe_without_waiting_for_it() -> None:
    # The process binds port 0 and says which it got: a port chosen for it could be taken meanwhile.
    said, told = Child(1, "pod-p1"), Child(2, "pod-p2")
    said.port_pipe, said_end = os.pipe()
    told.port_pipe, told_end = os.pipe()
    assert said.health_port() is None  # nothing said yet: no wait
    assert said.get("/readyz") == (0, "not answering (its health server has not started)")
    os.write(said_end, b"41234\n")
    assert said.health_port() == 41234
    assert said.health_port() == 41234  # read once, remembered
    os.close(said_end)
    os.close(told_end)  # the process ended before it said anything
    assert told.health_port() is None
    assert told.port_pipe is None
