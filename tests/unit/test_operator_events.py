"""The pool's events (pure): one per transition, the conditions one cause changed in one event, for a whole
migration as the gate and the condition summary decide it, and for the transitions outside one."""

from __future__ import annotations

from typing import Any

from fireflow_contract.migration_summary import MigrationSummary
from fireflow_operator.api.conditions import set_condition
from fireflow_operator.migration import machine
from fireflow_operator.pool_conditions import summarize
from fireflow_operator.status import transition_events

BEHIND = MigrationSummary("plan", migration_needed=True, current_version=122, required_version=125)
APPLIED = MigrationSummary("apply", current_version=125)


def _conditions(before: list[dict[str, Any]], step: machine.MigrationStep, **counts: Any) -> list[dict[str, Any]]:
    """The conditions a reconcile writes after `step` (as reconcile.py: summarize, then set each)."""
    counts = {"schema_version": 122, "target": 2, "replicas": 2, "ready": 2, "updated": 2, **counts}
    conds = list(before)
    for kind, ok, reason, message in summarize(step, **counts).conditions:
        conds = set_condition(conds, kind, ok, reason, message, 2)
    return conds


def test_should_post_one_event_per_step_of_an_offline_migration() -> None:
    base = machine.MigrationInput(
        target="t2", current_target="t1", migration={}, plan_job=machine.ABSENT, apply_job=machine.ABSENT,
        stale_apply_running=None, database_apply_running=None, schema_version=122, pods_left=2, now=1000.0,
        spec_key="k2", offline=True,
    )  # fmt: skip
    settled = machine.MigrationStep({"target": "t1", "phase": machine.DONE})
    steady = _conditions([], settled, schema_version=122)
    planning = machine.next_step(base)
    plan_done = machine.JobObservation("succeeded", BEHIND)
    draining = machine.next_step(machine.MigrationInput(**{**base.__dict__, "migration": planning.migration,
                                                           "plan_job": plan_done}))  # fmt: skip
    applying = machine.next_step(machine.MigrationInput(**{**base.__dict__, "migration": draining.migration,
                                                           "plan_job": plan_done, "pods_left": 0}))  # fmt: skip
    apply_done = machine.JobObservation("succeeded", APPLIED)
    done = machine.next_step(machine.MigrationInput(**{**base.__dict__, "migration": applying.migration,
                                                       "pods_left": 0, "apply_job": apply_done}))  # fmt: skip
    kept = machine.next_step(machine.MigrationInput(**{**base.__dict__, "migration": done.migration,
                                                       "current_target": "t2"}))  # fmt: skip
    sequence = [
        (planning, {}),
        (draining, {"ready": 1}),
        (draining, {"target": 0, "replicas": 0, "ready": 0}),  # the workers drained: no transition
        (applying, {"target": 0, "replicas": 0, "ready": 0}),
        (done, {"schema_version": 125, "replicas": 0, "ready": 0, "updated": 0}),
        (kept, {"schema_version": 125, "ready": 1}),
        (kept, {"schema_version": 125}),
    ]
    posted, conds = [], steady
    for step, counts in sequence:
        after = _conditions(conds, step, **counts)
        posted.append(transition_events(conds, after))
        conds = after
    assert posted == [
        [("Normal", "PlanningMigration", "SchemaReady=False, Ready=False, Progressing=True: a plan Job of the "
          "target image compares the database's schema version with the one it requires")],
        [("Normal", "DrainingForMigration", "SchemaReady=False: schema 122 is behind 125: draining the pool, as "
          "spec.migration.strategy is Offline")],
        [],
        [("Normal", "ApplyingMigration", "SchemaReady=False: no worker left: migrating schema 122 to 125")],
        [("Normal", "SchemaCurrent", "SchemaReady=True: migrated to schema 125")],
        [],
        [("Normal", "AllReplicasReady", "Ready=True, Progressing=False: 2/2 replicas ready")],
    ]  # fmt: skip


def _set(before: list[dict[str, Any]], *changes: tuple[str, bool, str, str]) -> list[dict[str, Any]]:
    conds = list(before)
    for kind, ok, reason, message in changes:
        conds = set_condition(conds, kind, ok, reason, message, 1)
    return conds


def test_should_name_a_rollout_a_scale_up_starts_and_warn_of_a_worker_lost() -> None:
    ready = _set([], ("Ready", True, "AllReplicasReady", "2/2"), ("Progressing", False, "Stable", "2/2 ready"),
                 ("Degraded", False, "Healthy", "no problem found"))  # fmt: skip
    scaling = _set(
        ready, ("Ready", False, "ReplicasNotReady", "2/3; rollout"), ("Progressing", True, "RollingOut", "2/3")
    )
    assert transition_events(ready, scaling) == [("Normal", "RollingOut", "Progressing=True, Ready=False: 2/3")]
    lost = _set(ready, ("Ready", False, "ReplicasNotReady", "1/2 replicas ready"))
    assert transition_events(ready, lost) == [("Warning", "ReplicasNotReady", "Ready=False: 1/2 replicas ready")]


def test_should_post_a_retry_and_the_problem_it_clears_as_one_event() -> None:
    failed = _set([], ("SchemaReady", False, "MigrationFailed", "attempt 1 of 3 failed"),
                  ("Degraded", True, "MigrationFailed", "attempt 1 of 3 failed"))  # fmt: skip
    retried = _set(failed, ("SchemaReady", False, "PlanningMigration", "attempt 2 of 3: a plan Job"),
                   ("Degraded", False, "Healthy", "no problem found"))  # fmt: skip
    assert transition_events(failed, retried) == [
        ("Normal", "PlanningMigration", "SchemaReady=False, Degraded=False: attempt 2 of 3: a plan Job")
    ]


def test_should_post_two_causes_of_one_reconcile_apart() -> None:
    planning = _set([], ("SchemaReady", False, "PlanningMigration", "plan"), ("ConnectionBudget", False,
                    "OverBudget", "3 need 33"), ("Degraded", True, "OverBudget", "3 need 33"),
                    ("Ready", False, "ReplicasNotReady", "0/3"))  # fmt: skip
    assert transition_events([], planning) == [
        ("Normal", "PlanningMigration", "SchemaReady=False, Ready=False: plan"),
        ("Warning", "OverBudget", "ConnectionBudget=False, Degraded=True: 3 need 33"),
    ]
