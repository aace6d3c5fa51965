"""The operator's pure parts, with plain asserts: builders, the migration gate, scaling, the budget."""

from __future__ import annotations

from fireflow_operator import migration, names
from fireflow_operator.budget import DatabaseFacts, compute_budget, database_identity
from fireflow_operator.builders import Pool, build_migration_job, build_pdb, build_statefulset, wants_pdb
from fireflow_operator.model import parse_spec
from fireflow_operator.recovery import stranded_executors
from fireflow_operator.scaling import plan_replicas

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


def test_should_leave_replicas_out_when_an_autoscaler_owns_them() -> None:
    sts = build_statefulset(_pool(), image="i", application_version="1", replicas=None)
    assert "replicas" not in sts["spec"]


def test_should_give_migration_jobs_deterministic_names_outside_the_worker_selector() -> None:
    target = names.target_hash("fireflow-worker:2", "1")
    job = build_migration_job(_pool(), mode="apply", image="fireflow-worker:2", target=target, attempt=2)
    assert job["metadata"]["name"] == f"pool-apply-{target}-2"
    assert job == build_migration_job(_pool(), mode="apply", image="fireflow-worker:2", target=target, attempt=2)
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert labels[names.LABEL_NAME] != names.WORKER_APP
    assert job["spec"]["template"]["spec"]["containers"][0]["args"][:3] == ["migrate", "--lock-timeout-ms", "5000"]
    plan = build_migration_job(_pool(), mode="plan", image="i", target=target, attempt=1)
    assert plan["spec"]["template"]["spec"]["containers"][0]["args"] == ["migrate", "--plan", "--exit-zero"]
    long_name = names.migration_job_name("p" * 80, "apply", target, 12)
    assert len(long_name) <= 63


def test_should_not_protect_a_single_replica_with_a_pdb() -> None:
    assert not wants_pdb(_pool(), 1)
    assert wants_pdb(_pool(), 2)
    assert not wants_pdb(_pool(podDisruptionBudget={"enabled": False}), 5)
    assert build_pdb(_pool())["spec"]["maxUnavailable"] == 1


def _step(**kwargs: object) -> migration.MigrationStep:
    base: dict[str, object] = {
        "target": "t2", "current_target": "t1", "migration": {}, "plan_job": migration.ABSENT,
        "apply_job": migration.ABSENT, "pods_left": 2, "now": 1000.0,
    }  # fmt: skip
    return migration.next_step(migration.MigrationInput(**{**base, **kwargs}))  # type: ignore[arg-type]


def test_should_plan_drain_apply_then_roll_out_when_the_schema_is_behind() -> None:
    step = _step()
    assert (step.create_job, step.migration["phase"], step.hold_at_zero) == ("plan", "Planning", False)
    behind = migration.JobObservation("succeeded", {"result": "ok", "migration_needed": True, "current_version": 1})
    step = _step(migration=step.migration, plan_job=behind)
    assert (step.migration["phase"], step.hold_at_zero, step.roll_out) == ("Draining", True, False)
    step = _step(migration=step.migration, plan_job=behind, pods_left=1)
    assert (step.migration["phase"], step.create_job, step.hold_at_zero) == ("Draining", None, True)
    step = _step(migration=step.migration, plan_job=behind, pods_left=0)
    assert (step.migration["phase"], step.create_job) == ("Applying", "apply")
    running = migration.JobObservation("running")
    step = _step(migration=step.migration, apply_job=running, pods_left=0)
    assert (step.hold_at_zero, step.roll_out) == (True, False)
    done = migration.JobObservation("succeeded", {"result": "ok", "current_version": 125})
    step = _step(migration=step.migration, apply_job=done, pods_left=0)
    assert (step.migration["phase"], step.roll_out, step.hold_at_zero, step.schema_version) == (
        "Done",
        True,
        False,
        125,
    )


def test_should_roll_out_without_draining_when_the_schema_is_current() -> None:
    step = _step()
    current = migration.JobObservation("succeeded", {"result": "ok", "migration_needed": False, "current_version": 125})
    step = _step(migration=step.migration, plan_job=current)
    assert (step.migration["phase"], step.roll_out, step.hold_at_zero) == ("Done", True, False)


def test_should_release_the_hold_and_retry_later_when_the_apply_fails() -> None:
    failed = migration.JobObservation("failed", {"result": "failed", "error": "lock timeout: x"})
    step = _step(migration={"target": "t2", "phase": "Applying", "attempt": 1}, apply_job=failed, pods_left=0)
    assert step.migration["phase"] == "Failed"
    assert step.hold_at_zero is False  # the previous version comes back at its size
    assert step.failure == "migration attempt 1 failed: lock timeout: x; retrying in 30 s"
    waiting = _step(migration=step.migration, now=1010.0)
    assert (waiting.create_job, waiting.migration["phase"]) == (None, "Failed")
    retry = _step(migration=step.migration, now=1031.0)
    assert (retry.create_job, retry.migration["attempt"]) == ("plan", 2)
    assert migration.retry_delay(10, 30.0) == 600.0


def test_should_start_over_when_the_target_changes_mid_migration() -> None:
    step = _step(target="t3", migration={"target": "t2", "phase": "Draining", "attempt": 1})
    assert (step.migration, step.hold_at_zero) == ({"target": "t3", "phase": "Planning", "attempt": 1}, False)


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


def test_should_budget_every_pool_on_the_database() -> None:
    facts = DatabaseFacts(max_connections=100, superuser_reserved=3, reserved=0, others_in_use=7,
                          schema_version=125, foreign_applications=())  # fmt: skip
    budget = compute_budget(facts, pool_size=10, headroom=10, other_pools=22)
    # 100 - 3 - 10 - 7 - 22 - 3 (migration Job) = 55 -> 5 replicas of 11
    assert (budget.per_replica, budget.max_replicas) == (11, 5)
    assert budget.explain(8).startswith("8 replicas need 88 connections (11 each) but only 55 fit")
    assert database_identity("postgresql://u:secret@db.example:6543/exec") == "db.example:6543/exec"


def test_should_strand_only_gone_pods_at_or_above_the_replica_count() -> None:
    pending = ["ns.pool-0", "ns.pool-1", "ns.pool-2", "ns.pool-3", "other.pool-4", "ns.poolx-5"]
    stranded = stranded_executors(pending, namespace="ns", statefulset="pool", replicas=1, live_pods={"pool-2"})
    assert stranded == ["ns.pool-1", "ns.pool-3"]  # pool-2 still exists: it may be running its runs
