"""The operator's pure parts, with plain asserts: builders, the migration gate, scaling, the budget."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from fireflow_contract import executor_ids, worker_variables
from fireflow_contract.executor_ids import processes_for_cpu_limit
from fireflow_operator.api import names
from fireflow_operator.api.k8s_types import cpu_cores
from fireflow_operator.api.model import RESERVED_ENV, parse_spec, worker_processes
from fireflow_operator.capacity.scaling import plan_replicas
from fireflow_operator.children.builders import Pool, build_migration_job, build_pdb, build_statefulset, wants_pdb
from fireflow_operator.database.recovery import stranded_executors
from fireflow_operator.finalizer import Waiting, waiting_status
from fireflow_operator.kube import merge_patch
from fireflow_operator.observability import metrics
from fireflow_operator.observability.pool_metrics import pool_samples
from fireflow_operator.pool_index import PoolIndex
from fireflow_worker.processes import cgroup_cpu_limit

SPEC = {"image": "fireflow-worker:1", "database": {"secretRef": {"name": "db"}}, "replicas": 3}


def _pool(**spec: object) -> Pool:
    return Pool(name="pool", namespace="ns", uid="uid-1", spec=parse_spec({**SPEC, **spec}))


def test_should_build_a_statefulset_whose_pod_names_are_executor_ids() -> None:
    sts = build_statefulset(_pool(), image="fireflow-worker:1", application_version="7", replicas=3)
    container = sts["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["FIREFLOW_WORKER_ID"]["value"] == "$(POD_NAMESPACE).$(POD_NAME)"
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["FIREFLOW_APPLICATION_VERSION"]["value"] == "7"
    assert env["DBOS_RUN_MIGRATIONS"]["value"] == "false"
    assert env["DATABASE_URL_EXECUTIONS"]["valueFrom"]["secretKeyRef"] == {"name": "db", "key": "url"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["runAsNonRoot"] is True
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    assert sts["spec"]["replicas"] == 3
    assert sts["spec"]["selector"]["matchLabels"] == names.selector_labels("pool")
    assert sts["metadata"]["ownerReferences"][0]["uid"] == "uid-1"


def test_should_name_the_pool_to_every_versions_workers_for_their_log_lines() -> None:
    for index in (0, 2):
        sts = build_statefulset(_pool(), image="i", application_version="1", replicas=1, version_index=index)
        env = {e["name"]: e for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}
        # The worker's log lines carry `pool` from it, and `namespace` from POD_NAMESPACE.
        assert env[worker_variables.POOL] == {"name": "FIREFLOW_POOL", "value": "pool"}
        assert env[worker_variables.POD_NAMESPACE]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


def test_should_leave_replicas_out_when_an_autoscaler_owns_them() -> None:
    sts = build_statefulset(_pool(), image="i", application_version="1", replicas=None)
    assert "replicas" not in sts["spec"]


def test_should_give_migration_jobs_deterministic_names_outside_the_worker_selector() -> None:
    target = names.target_hash("fireflow-worker:2", "1")
    args = {"image": "fireflow-worker:2", "target": target, "round_": 2, "database_label": "db1"}
    job = build_migration_job(_pool(), mode="apply", **args)  # type: ignore[arg-type]
    assert job["metadata"]["name"] == f"pool-apply-{target}-2"
    assert job == build_migration_job(_pool(), mode="apply", **args)  # type: ignore[arg-type]
    assert job["metadata"]["labels"][names.LABEL_DATABASE] == "db1"
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["PGAPPNAME"] == names.MIGRATION_APPLICATION_NAME  # not counted twice by the budget
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert labels[names.LABEL_NAME] != names.WORKER_APP
    assert job["spec"]["template"]["spec"]["containers"][0]["args"][:3] == ["migrate", "--lock-timeout-ms", "5000"]
    plan = build_migration_job(_pool(), mode="plan", image="i", target=target, round_=1, database_label="db1")
    assert plan["spec"]["template"]["spec"]["containers"][0]["args"] == ["migrate", "--plan", "--exit-zero"]
    long_name = names.migration_job_name("p" * 80, "apply", target, 12)
    assert len(long_name) <= 63


def test_should_decide_processes_per_pod_as_the_worker_would() -> None:
    assert worker_processes(_pool().spec) == 1  # no CPU limit
    assert worker_processes(_pool(resources={"limits": {"cpu": "1500m"}}).spec) == 2
    assert worker_processes(_pool(resources={"limits": {"cpu": 4}}).spec) == 4
    assert worker_processes(_pool(resources={"limits": {"cpu": "0.1"}}).spec) == 1
    assert worker_processes(_pool(resources={"limits": {"cpu": 4}}, dbos={"workerProcesses": 2}).spec) == 2
    sts = build_statefulset(_pool(dbos={"workerProcesses": 3}), image="i", application_version="1", replicas=1)
    env = {e["name"]: e.get("value") for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["FIREFLOW_WORKER_PROCESSES"] == "3"


def test_should_reserve_every_variable_the_operator_sets() -> None:
    sts = build_statefulset(_pool(), image="i", application_version="1", replicas=1)
    set_by_operator = {e["name"] for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert set_by_operator <= set(RESERVED_ENV)
    for name in sorted(RESERVED_ENV):
        with pytest.raises(ValidationError, match="may not set a variable the operator manages"):
            parse_spec({**SPEC, "env": [{"name": name, "value": "1"}]})


def test_should_not_protect_a_single_replica_with_a_pdb() -> None:
    assert not wants_pdb(_pool(), 1)
    assert wants_pdb(_pool(), 2)
    assert not wants_pdb(_pool(podDisruptionBudget={"enabled": False}), 5)
    assert build_pdb(_pool())["spec"]["maxUnavailable"] == 1


def test_should_never_write_an_autoscaled_count_that_fits() -> None:
    plan = plan_replicas(spec_replicas=None, current=4, saved=None, max_replicas=10, hold_at_zero=False)
    assert (plan.desired, plan.allowed, plan.write) == (4, 4, None)
    clamped = plan_replicas(spec_replicas=None, current=12, saved=None, max_replicas=10, hold_at_zero=False)
    assert clamped.write == 10
    held = plan_replicas(spec_replicas=None, current=4, saved=None, max_replicas=10, hold_at_zero=True)
    assert held.write == 0
    restored = plan_replicas(spec_replicas=None, current=0, saved=4, max_replicas=10, hold_at_zero=False)
    assert restored.write == 4
    owned = plan_replicas(spec_replicas=6, current=2, saved=None, max_replicas=5, hold_at_zero=False)
    assert (owned.desired, owned.allowed, owned.write) == (6, 5, 5)


def test_should_keep_running_workers_through_a_burst_but_not_grow_into_it() -> None:
    # The burst leaves room for 2 (max_replicas), its lowest point over the window for 4 (max_kept).
    kept = plan_replicas(spec_replicas=5, current=3, saved=None, max_replicas=2, max_kept=4, hold_at_zero=False)
    assert (kept.allowed, kept.write) == (3, 3)  # nobody removed, nobody added
    lasting = plan_replicas(spec_replicas=5, current=3, saved=None, max_replicas=1, max_kept=1, hold_at_zero=False)
    assert lasting.allowed == 1  # usage that lasted the whole window does shrink the pool


def test_should_strand_only_gone_pods_at_or_above_the_replica_count() -> None:
    pending = ["ns.pool-0", "ns.pool-1", "ns.pool-2", "ns.pool-3", "other.pool-4", "ns.poolx-5", "ns.pool-3-p1",
               "ns.pool-v2-7", "ns.pool-1x"]  # fmt: skip
    stranded = stranded_executors(pending, namespace="ns", statefulset="pool", replicas=1, live_pods={"pool-2": 1})
    assert stranded == ["ns.pool-1", "ns.pool-3", "ns.pool-3-p1"]  # pool-2 still exists: it may be running its runs
    versioned = stranded_executors(pending, namespace="ns", statefulset="pool-v2", replicas=3, live_pods={})
    assert versioned == ["ns.pool-v2-7"]
    processes = ["ns.pool-0", "ns.pool-0-p1", "ns.pool-0-p2", "ns.pool-0-p3"]
    fewer = stranded_executors(processes, namespace="ns", statefulset="pool", replicas=1, live_pods={"pool-0": 2})
    assert fewer == ["ns.pool-0-p2", "ns.pool-0-p3"]  # the pod runs 2 processes now: -p2 and -p3 never return


def test_should_patch_only_what_changed_and_null_nested_keys_that_vanished() -> None:
    stored = {"phase": "Running", "migration": {"phase": "Done", "attempt": 2, "message": "m", "round": 3}}
    rebuilt = {"phase": "Running", "migration": {"phase": "Done", "round": 3}}
    assert merge_patch(stored, rebuilt) == {"migration": {"attempt": None, "message": None}}
    assert merge_patch(rebuilt, rebuilt) == {}  # an idle pool: nothing to write
    assert merge_patch({"conditions": [1, 2]}, {"conditions": [1]}) == {"conditions": [1]}  # lists whole
    assert merge_patch({"a": {"b": 1}}, {}) == {"a": None}


def test_should_tell_a_pools_executors_from_another_pools() -> None:
    pattern = executor_ids.pool_executor_pattern("ns", "pool")
    ours = ["ns.pool-0", "ns.pool-12-p3", "ns.pool-v2-0", "ns.pool-v17-4-p1"]
    others = ["ns.pool-b-0", "ns.pool-0-0", "other.pool-0", "ns.pools-0", "ns.pool-v2-b-0", "ns.pool"]
    assert [e for e in ours + others if pattern.fullmatch(e)] == ours


def _pool_body(name: str, version: int) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": str(version)}}


def test_should_keep_the_fleet_from_watch_events_without_a_stale_list_undoing_them() -> None:
    index = PoolIndex()
    index.observe(_pool_body("a", 10))
    index.observe(_pool_body("b", 12), deleted=True)  # deleted while the LIST below was under way
    listed = [_pool_body("a", 9), _pool_body("b", 11), _pool_body("c", 11)]
    calls: list[int] = []

    def list_all() -> list[dict[str, Any]]:
        calls.append(1)
        return listed

    assert sorted((p["metadata"]["name"], p["metadata"]["resourceVersion"]) for p in index.pools(list_all)) == [
        ("a", "10"),
        ("c", "11"),
    ]
    index.observe(_pool_body("b", 13))  # created again
    index.observe(_pool_body("c", 14), deleted=True)
    assert sorted(p["metadata"]["name"] for p in index.pools(list_all)) == ["a", "b"]
    assert calls == [1]  # listed once, then only the watch


def test_should_drop_from_the_index_what_a_later_list_lacks_and_take_a_standbys_list_as_the_fleet() -> None:
    index = PoolIndex()
    index.observe(_pool_body("gone", 5))  # deleted while the standby's watch was down: its event missed
    index.observe(_pool_body("newer", 21))  # created after the LIST below started
    index.listed([_pool_body("kept", 8)], "", 20)
    index.mark_filled()
    assert sorted(p["metadata"]["name"] for p in index.pools(lambda: [])) == ["kept", "newer"]
    index.observe(_pool_body("gone", 6))  # an older event after the LIST: it stays deleted
    assert sorted(p["metadata"]["name"] for p in index.pools(lambda: [])) == ["kept", "newer"]


def test_should_publish_runs_not_recovered_as_a_series_when_the_finalizer_is_blocked() -> None:
    ready = {"type": "Ready", "status": "True", "reason": "AllReplicasReady", "message": "", "lastTransitionTime": "x"}
    status = {"replicas": 0, "conditions": [ready]}
    blocked = waiting_status(status, Waiting("recreate Secret 'db'", blocked=True), generation=3)
    waiting = waiting_status(status, Waiting("waiting for the workers to drain"), generation=3)

    def conditions_of(after: dict[str, Any]) -> set[tuple[str, ...]]:
        samples = pool_samples(after)
        return {(*labels, str(value)) for gauge, labels, value in samples if gauge is metrics.POOL_CONDITION}

    assert conditions_of(blocked) == {("Ready", "RunsNotRecovered", "0.0"), ("Degraded", "RunsNotRecovered", "1.0")}
    assert conditions_of(waiting) == {("Ready", "Deleting", "0.0")}
    assert blocked["replicas"] == 0 and status["conditions"] == [ready]  # the rest kept, the input untouched


@pytest.mark.parametrize("limit", ["100m", "1", "1500m", "2", "2001m", 3, "64", "200"])
def test_should_count_the_processes_a_worker_runs_for_its_cpu_limit_as_the_worker_does(limit: str | int) -> None:
    # The worker reads its limit from the cgroup as cores (cpu.max quota / period); the operator from the spec.
    quota = int(cpu_cores(str(limit)) * 100_000)
    cores = cgroup_cpu_limit(f"{quota} 100000", None, None)
    assert worker_processes(_pool(resources={"limits": {"cpu": limit}}).spec) == processes_for_cpu_limit(cores)
