"""The migration gate (pure): its examples, then its invariants over thousands of random sequences.

The sequences drive the gate the way reconcile.py does (the same Job naming, stale-apply and clean-up
functions) against a small model of the world: Jobs that finish in any order and may fail, workers that
take time to drain, a user who changes the target at any moment (back to an earlier one too), and a
database whose schema only moves forward. The same invariants are checked on a real cluster in
test_sequences.py.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from fireflow_contract.migration_summary import MigrationSummary
from fireflow_operator.migration import jobs, machine
from fireflow_operator.pool_conditions import summarize

OK_PLAN = MigrationSummary("plan", migration_needed=False, current_version=125, required_version=125)


def _step(**kwargs: Any) -> machine.MigrationStep:
    base: dict[str, Any] = {
        "target": "t2", "current_target": "t1", "migration": {}, "plan_job": machine.ABSENT,
        "apply_job": machine.ABSENT, "stale_apply_running": None, "database_apply_running": None,
        "schema_version": 100, "pods_left": 2, "now": 1000.0, "spec_key": "k2",
    }  # fmt: skip
    return machine.next_step(machine.MigrationInput(**{**base, **kwargs}))


def _summary(observation: machine.JobObservation) -> MigrationSummary:
    assert observation.summary is not None
    return observation.summary


def _behind(current: int = 100) -> machine.JobObservation:
    summary = MigrationSummary("plan", migration_needed=True, current_version=current, required_version=125)
    return machine.JobObservation("succeeded", summary)


def test_should_plan_drain_apply_then_roll_out_when_the_schema_is_behind() -> None:
    step = _step()
    assert (step.create_job, step.migration["phase"], step.hold_at_zero) == ("plan", "Planning", False)
    step = _step(migration=step.migration, plan_job=_behind())
    assert (step.migration["phase"], step.hold_at_zero, step.roll_out) == ("Draining", True, False)
    step = _step(migration=step.migration, pods_left=1)
    assert (step.migration["phase"], step.create_job, step.hold_at_zero) == ("Draining", None, True)
    step = _step(migration=step.migration, pods_left=0)
    assert (step.migration["phase"], step.create_job) == ("Applying", "apply")
    step = _step(migration=step.migration, apply_job=machine.JobObservation("running"), pods_left=0)
    assert (step.hold_at_zero, step.roll_out) == (True, False)
    done = machine.JobObservation("succeeded", MigrationSummary("apply", current_version=125))
    step = _step(migration=step.migration, apply_job=done, pods_left=0)
    assert (step.migration["phase"], step.roll_out, step.hold_at_zero, step.schema_version) == (
        "Done",
        True,
        False,
        125,
    )


def test_should_say_what_planning_does_even_after_a_done_round() -> None:
    done = _step(migration=_step().migration, plan_job=machine.JobObservation("succeeded", OK_PLAN)).migration
    assert done["message"] == "schema 125 is current: rolling update"
    replanned = _step(migration=done, target="t3", spec_key="k3").migration  # a new image: a new round
    summary = summarize(machine.MigrationStep(replanned), schema_version=125, target=2, replicas=2, ready=2,
                        updated=0)  # fmt: skip
    schema_ready = next(cond for cond in summary.conditions if cond[0] == "SchemaReady")
    assert schema_ready == (
        "SchemaReady",
        False,
        "PlanningMigration",
        "a plan Job of the target image compares the database's schema version with the one it requires",
    )


def test_should_roll_out_without_draining_when_the_schema_is_current() -> None:
    step = _step()
    step = _step(migration=step.migration, plan_job=machine.JobObservation("succeeded", OK_PLAN))
    assert (step.migration["phase"], step.roll_out, step.hold_at_zero) == ("Done", True, False)


def test_should_skip_its_own_apply_when_another_pool_migrated_the_database_meanwhile() -> None:
    planning = _step().migration
    waiting = _step(migration=planning, plan_job=_behind(), database_apply_running="Job b/x")
    assert (waiting.migration["phase"], waiting.hold_at_zero, waiting.create_job) == ("Planning", False, None)
    assert waiting.migration["message"] == "schema 100 is behind 125; waiting for Job b/x"
    after = _step(migration=waiting.migration, plan_job=_behind(), schema_version=125)
    assert (after.migration["phase"], after.roll_out, after.hold_at_zero) == ("Done", True, False)


def test_should_retry_with_the_previous_version_serving_then_abandon() -> None:
    failed = machine.JobObservation("failed", MigrationSummary("apply", result="failed", error="lock timeout: x"))
    m: dict[str, Any] = {"target": "t2", "phase": "Applying", "round": 4, "attempt": 1, "specKey": "k2"}
    step = _step(migration=m, apply_job=failed, pods_left=0)
    assert (step.migration["phase"], step.hold_at_zero) == ("Failed", False)  # the previous version comes back
    assert step.failure == "migration attempt 1 of 3 failed: lock timeout: x; retrying in 30 s"
    assert _step(migration=step.migration, now=1010.0).create_job is None
    retry = _step(migration=step.migration, now=1031.0)
    assert (retry.create_job, retry.migration["attempt"], retry.migration["round"]) == ("plan", 2, 5)
    last = _step(migration={**m, "attempt": 3}, apply_job=failed, pods_left=0)
    assert (last.migration["phase"], last.abandoned, last.hold_at_zero) == ("Abandoned", True, False)
    assert last.failure is not None and last.failure.startswith("migration attempt 3 of 3 failed: lock timeout: x; ")
    assert last.failure.endswith("abandoned until spec.image, spec.dbos.applicationVersion or spec.migration changes")
    assert _step(migration=last.migration, now=99_999.0).create_job is None  # stays abandoned
    fresh = _step(migration=last.migration, spec_key="k2-longer-lock-timeout")
    assert (fresh.create_job, fresh.migration["attempt"]) == ("plan", 1)
    assert machine.retry_delay(10, 30.0) == 600.0


def test_should_hold_until_an_apply_of_an_earlier_target_ends() -> None:
    m = {"target": "t2", "phase": "Applying", "round": 3, "attempt": 1, "specKey": "k2"}
    step = _step(target="t3", migration=m, stale_apply_running="apply Job pool-apply-t2-3", pods_left=0)
    assert (step.hold_at_zero, step.create_job, step.migration["target"]) == (True, None, "t2")
    reverted = _step(target="t1", migration=m, stale_apply_running="apply Job pool-apply-t2-3", pods_left=0)
    assert (reverted.hold_at_zero, reverted.roll_out) == (True, False)
    after = _step(target="t3", migration=m, pods_left=0)
    assert (after.create_job, after.migration["target"], after.migration["round"]) == ("plan", "t3", 4)


def test_should_apply_online_while_the_pool_serves_unless_the_step_is_unsafe() -> None:
    safe = machine.JobObservation("succeeded", replace(_summary(_behind()), online_safe=True))
    planning = _step().migration
    online = _step(migration=planning, plan_job=safe)
    assert (online.migration["phase"], online.create_job, online.hold_at_zero) == ("Applying", "apply", False)
    assert online.migration["message"] == "schema 100 is behind 125: applying online, the pool keeps serving"
    running = _step(migration=online.migration, apply_job=machine.JobObservation("running"))
    assert running.hold_at_zero is False  # the previous version keeps serving
    unsafe_summary = replace(_summary(_behind()), online_safe=False, unsafe=["migration 3: builds an index"])
    drained = _step(migration=planning, plan_job=machine.JobObservation("succeeded", unsafe_summary))
    assert (drained.migration["phase"], drained.hold_at_zero) == ("Draining", True)
    assert drained.migration["message"].endswith("as the step is not online-safe (migration 3: builds an index)")
    offline = _step(migration=planning, plan_job=safe, offline=True)
    assert offline.migration["message"].endswith("draining the pool, as spec.migration.strategy is Offline")
    stale_online = _step(target="t3", migration=online.migration, stale_apply_running="x", stale_apply_online=True)
    assert stale_online.hold_at_zero is False


def test_should_go_back_to_the_rolled_out_target_at_once() -> None:
    m = {"target": "t2", "phase": "Draining", "round": 3, "attempt": 1, "replicasBefore": 4}
    step = _step(target="t1", migration=m)
    assert (step.migration["phase"], step.migration["target"], step.hold_at_zero, step.create_job) == (
        "Done", "t1", False, None,
    )  # fmt: skip
    assert step.migration["replicasBefore"] == 4  # the autoscaler's count comes back


def test_should_delete_finished_jobs_once_recorded_but_the_newest_failure() -> None:
    made = [
        jobs.MigrationJob("p-plan-a-1", "plan", "succeeded", "2026-01-01T00:00:01", "a"),
        jobs.MigrationJob("p-apply-a-1", "apply", "failed", "2026-01-01T00:00:02", "a"),
        jobs.MigrationJob("p-plan-a-2", "plan", "succeeded", "2026-01-01T00:00:03", "a"),
        jobs.MigrationJob("p-apply-a-2", "apply", "failed", "2026-01-01T00:00:04", "a"),
        jobs.MigrationJob("p-plan-a-3", "plan", "succeeded", "2026-01-01T00:00:05", "a"),
        jobs.MigrationJob("p-apply-a-3", "apply", "running", "2026-01-01T00:00:06", "a"),
    ]
    in_flight = {"target": "a", "phase": "Applying", "round": 3}
    assert jobs.jobs_to_delete(made, "p", in_flight, "a") == ["p-apply-a-1", "p-plan-a-1", "p-plan-a-2"]
    done = [*made[:5], jobs.MigrationJob("p-apply-a-3", "apply", "succeeded", "2026-01-01T00:00:06", "a")]
    assert jobs.jobs_to_delete(done, "p", {"target": "a", "phase": "Done", "round": 3}, "a") == [
        "p-apply-a-1", "p-apply-a-3", "p-plan-a-1", "p-plan-a-2", "p-plan-a-3",
    ]  # fmt: skip
    # The spec went back to `a`: a plan for `b` that cannot start goes; a running apply never does.
    unwanted = [*done, jobs.MigrationJob("p-plan-b-4", "plan", "running", "2026-01-01T00:00:07", "b"),
                jobs.MigrationJob("p-apply-b-5", "apply", "running", "2026-01-01T00:00:08", "b")]  # fmt: skip
    assert "p-plan-b-4" in jobs.jobs_to_delete(unwanted, "p", {"target": "a", "phase": "Done", "round": 3}, "a")
    assert "p-apply-b-5" not in jobs.jobs_to_delete(unwanted, "p", {"target": "a", "phase": "Done", "round": 3}, "a")
    assert jobs.stale_apply(made, "p-apply-b-4") == made[5]
    assert jobs.stale_apply(made, "p-apply-a-3") is None


@dataclass
class _World:
    """What the gate acts on, reduced to what its promises are about."""

    rng: random.Random
    required: dict[str, int]  # schema version each target's image needs
    offline: bool = False  # spec.migration.strategy
    unsafe: set[str] = field(default_factory=set)  # targets whose migration step is not online-safe
    schema: int = 100
    spec_target: str = "t0"
    current_target: str | None = None  # as the pool's status records it
    sts_target: str | None = None  # what the StatefulSet runs (written before the status)
    status: dict[str, Any] = field(default_factory=dict)
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> {mode, target, state, created}
    finished_and_deleted: set[str] = field(default_factory=set)  # Jobs that ran to their end, then went
    pods: list[str] = field(default_factory=list)  # the target of each live worker
    held: bool = False
    lock_held: bool = False  # a long transaction: applies fail
    now: float = 0.0
    clock: int = 0
    log: list[str] = field(default_factory=list)

    def running_applies(self, *, offline_only: bool = False) -> list[str]:
        return [
            n
            for n, j in self.jobs.items()
            if j["mode"] == "apply" and j["state"] == "running" and not (offline_only and j["online"])
        ]

    def observe(self, name: str) -> machine.JobObservation:
        job = self.jobs.get(name)
        if job is None:
            return machine.ABSENT
        summary = job.get("summary")
        return machine.JobObservation(job["state"], MigrationSummary.from_mapping(summary) if summary else None)

    def reconcile(self, status_lost: bool = False) -> None:
        """One reconcile; with `status_lost` its status write fails after everything else was done."""
        records = [
            jobs.MigrationJob(n, j["mode"], j["state"], f"{j['created']:09d}", j["target"], j["online"])
            for n, j in self.jobs.items()
        ]
        stale = jobs.stale_apply(records, jobs.round_job_names("pool", self.status)["apply"])
        persisted = dict(self.status)
        names_ = jobs.round_job_names("pool", self.status)
        step = machine.next_step(
            machine.MigrationInput(
                target=self.spec_target,
                current_target=self.current_target,
                migration=dict(self.status),
                plan_job=self.observe(names_["plan"]),
                apply_job=self.observe(names_["apply"]),
                stale_apply_running=stale.name if stale is not None else None,
                stale_apply_online=stale is not None and stale.online,
                database_apply_running=None,
                schema_version=self.schema,
                pods_left=len(self.pods),
                now=self.now,
                spec_key=self.spec_target,
                max_attempts=3,
                retry_base_seconds=5.0,
                offline=self.offline,
            )
        )
        if self.running_applies(offline_only=True):
            running = self.running_applies(offline_only=True)
            assert step.hold_at_zero, f"workers allowed while offline {running} runs: {self.log[-8:]}"
        if step.create_job is not None:
            round_ = machine.job_round(step.migration)
            target = step.migration["target"]
            name = f"pool-{step.create_job}-{target}-{round_}"
            online = bool(step.migration.get("online"))
            if step.create_job == "apply":
                assert online or not self.pods, f"offline apply created with workers alive: {self.log[-8:]}"
                assert not online or not (self.offline or target in self.unsafe), "an unsafe step applied online"
                assert not [a for a in self.running_applies() if a != name], "two apply Jobs at once"
            if name not in self.jobs:
                # A finished Job made again would run its plan or apply twice (the name is the round's). A plan
                # deleted while it ran (no longer wanted) may be made again: its answer was never read.
                assert name not in self.finished_and_deleted, f"{name} created twice: {self.log[-8:]}"
                self.clock += 1
                self.jobs[name] = {"mode": step.create_job, "target": target, "state": "running",
                                   "created": self.clock, "online": online}  # fmt: skip
        current = self.current_target
        if step.roll_out:
            target = self.spec_target
            assert self.required[target] <= self.schema, f"{target} rolled out on schema {self.schema}"
            current = target
        self.sts_target = current
        for name in jobs.jobs_to_delete(records, "pool", persisted, self.spec_target, step.migration):
            if self.jobs.pop(name)["state"] != "running":
                self.finished_and_deleted.add(name)
        self.held = step.hold_at_zero
        if not status_lost:
            self.status, self.current_target = step.migration, current
        self.log.append(f"reconcile -> {step.migration.get('phase')} hold={step.hold_at_zero} lost={status_lost}")

    def finish_a_job(self) -> None:
        running = sorted(n for n, j in self.jobs.items() if j["state"] == "running")
        if not running:
            return
        name = self.rng.choice(running)
        job = self.jobs[name]
        needed = self.required[job["target"]]
        if job["mode"] == "plan":
            job["summary"] = {"action": "plan", "migration_needed": self.schema < needed,
                              "current_version": self.schema, "required_version": needed,
                              "online_safe": job["target"] not in self.unsafe}  # fmt: skip
            job["state"] = "succeeded"
        elif self.lock_held:
            job["summary"] = {"action": "apply", "result": "failed", "error": "lock timeout"}
            job["state"] = "failed"
        else:
            self.schema = max(self.schema, needed)
            job["summary"] = {"action": "apply", "current_version": self.schema}
            job["state"] = "succeeded"
        self.log.append(f"{name} {job['state']}")

    def move_pods(self) -> None:
        """The StatefulSet controller: drain when held, else bring up the rolled-out target's workers."""
        target = self.sts_target
        if self.held or target is None:
            if self.pods:
                self.pods.pop()
        elif len(self.pods) < 3:
            self.pods.append(target)
        elif any(p != target for p in self.pods):  # rolling update, one pod at a time
            self.pods[self.pods.index(next(p for p in self.pods if p != target))] = target
        for target in self.pods:
            assert self.required[target] <= self.schema, f"a worker of {target} runs on schema {self.schema}"


@pytest.mark.parametrize("sequence", range(300))
def test_should_keep_the_gate_invariants_in_any_sequence(sequence: int) -> None:
    rng = random.Random(sequence)
    targets = [f"t{i}" for i in range(5)]
    world = _World(
        rng,
        required={t: rng.choice([100, 100, 110, 125]) for t in targets},
        offline=rng.random() < 0.4,
        unsafe={t for t in targets if rng.random() < 0.3},
    )
    for _ in range(rng.randint(20, 120)):
        action = rng.random()
        if action < 0.12:
            world.spec_target = rng.choice(targets)
            world.log.append(f"user -> {world.spec_target}")
        elif action < 0.17:
            world.lock_held = not world.lock_held
        elif action < 0.42:
            world.finish_a_job()
        elif action < 0.62:
            world.move_pods()
        else:
            world.now += rng.choice([0.5, 2.0, 10.0])
            world.reconcile(status_lost=rng.random() < 0.1)
    # Then the user stops changing things and the lock goes: the pool converges on the spec's target.
    world.lock_held = False
    for _ in range(400):
        world.now += 10.0
        world.reconcile()
        world.finish_a_job()
        world.move_pods()
    if world.status.get("phase") == machine.ABANDONED:  # until the spec changes: nothing else to check
        assert world.current_target != world.spec_target
        return
    assert world.current_target == world.spec_target, world.log[-10:]
    assert world.pods == [world.spec_target] * 3
    assert len([j for j in world.jobs.values() if j["state"] == "failed"]) <= 1  # finished Jobs cleaned up
    assert all(j["state"] != "succeeded" for j in world.jobs.values())
