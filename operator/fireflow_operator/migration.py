"""The migration gate as a pure state machine: plan -> (drain -> apply) -> roll out, or fail and retry.

For every new rollout target (image, application version) a plan Job runs the *new* image's
`migrate --plan`. Behind: the pool is held at zero replicas, and once no pod is left the apply Job runs;
only its success lets a pod of the new target start. Not behind: an ordinary rolling update. A failed
plan or apply releases the hold (the previous target keeps running at its size) and is retried after a
back-off as a new attempt, whose Jobs have new deterministic names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

PLANNING = "Planning"
DRAINING = "Draining"
APPLYING = "Applying"
FAILED = "Failed"
DONE = "Done"

JobState = Literal["absent", "running", "succeeded", "failed"]


@dataclass(frozen=True)
class JobObservation:
    state: JobState
    summary: dict[str, Any] | None = None  # the JSON line of `fireflow-worker migrate`
    message: str = ""

    @property
    def error(self) -> str:
        if self.summary and self.summary.get("error"):
            return str(self.summary["error"])
        return self.message or "the Job failed without a message"


ABSENT = JobObservation("absent")


@dataclass(frozen=True)
class MigrationInput:
    target: str
    current_target: str | None  # the target the StatefulSet runs; None before the first rollout
    migration: dict[str, Any]  # status.migration as last written
    plan_job: JobObservation
    apply_job: JobObservation
    pods_left: int
    now: float
    retry_base_seconds: float = 30.0


@dataclass(frozen=True)
class MigrationStep:
    migration: dict[str, Any]
    create_job: Literal["plan", "apply"] | None = None
    hold_at_zero: bool = False
    roll_out: bool = False
    schema_version: int | None = None
    failure: str | None = None
    events: list[tuple[str, str]] = field(default_factory=list)  # (reason, message)


def retry_delay(attempt: int, base: float) -> float:
    return float(min(base * 2 ** (attempt - 1), 600.0))


def _failed(m: dict[str, Any], inp: MigrationInput, what: str, error: str) -> MigrationStep:
    delay = retry_delay(int(m["attempt"]), inp.retry_base_seconds)
    message = f"{what} attempt {m['attempt']} failed: {error}; retrying in {int(delay)} s"
    failed = {**m, "phase": FAILED, "message": message, "retryAt": inp.now + delay}
    return MigrationStep(failed, failure=message, events=[("MigrationFailed", message)])


def next_step(inp: MigrationInput) -> MigrationStep:
    m = dict(inp.migration)
    if inp.current_target == inp.target and m.get("phase") in (None, DONE):
        return MigrationStep({**m, "target": inp.target, "phase": DONE})
    if m.get("target") != inp.target:
        m = {"target": inp.target, "phase": PLANNING, "attempt": 1}
        return MigrationStep(m, create_job="plan", events=[("MigrationPlanning", "planning the schema migration")])
    phase = m.get("phase")
    if phase == PLANNING:
        plan = inp.plan_job
        if plan.state == "absent":
            return MigrationStep(m, create_job="plan")
        if plan.state == "running":
            return MigrationStep(m)
        if plan.state == "failed" or not plan.summary or plan.summary.get("result") != "ok":
            return _failed(m, inp, "migration plan", plan.error)
        version = plan.summary.get("current_version")
        if plan.summary.get("migration_needed"):
            message = f"schema {version} is behind {plan.summary.get('required_version')}: draining the pool"
            return MigrationStep({**m, "phase": DRAINING}, hold_at_zero=True, events=[("MigrationDraining", message)])
        done = {**m, "phase": DONE, "message": f"schema {version} is current: rolling update"}
        return MigrationStep(done, roll_out=True, schema_version=version, events=[("RollingUpdate", done["message"])])
    if phase == DRAINING:
        if inp.pods_left > 0:
            return MigrationStep(m, hold_at_zero=True)
        message = "no worker left: applying the migration"
        return MigrationStep(
            {**m, "phase": APPLYING}, create_job="apply", hold_at_zero=True, events=[("MigrationApplying", message)]
        )
    if phase == APPLYING:
        apply = inp.apply_job
        if apply.state == "absent":
            return MigrationStep(m, create_job="apply", hold_at_zero=True)
        if apply.state == "running":
            return MigrationStep(m, hold_at_zero=True)
        if apply.state == "failed" or not apply.summary or apply.summary.get("result") != "ok":
            return _failed(m, inp, "migration", apply.error)
        version = apply.summary.get("current_version")
        done = {**m, "phase": DONE, "message": f"migrated to schema {version}"}
        return MigrationStep(
            done, roll_out=True, schema_version=version, events=[("MigrationSucceeded", done["message"])]
        )
    if phase == FAILED:
        if inp.now < float(m.get("retryAt", 0)):
            return MigrationStep(m, failure=str(m.get("message", "")))
        retry = {"target": inp.target, "phase": PLANNING, "attempt": int(m.get("attempt", 1)) + 1}
        return MigrationStep(retry, create_job="plan", events=[("MigrationRetrying", f"attempt {retry['attempt']}")])
    # DONE for a target not yet rolled out (the rollout is applied by the caller).
    return MigrationStep(m, roll_out=True)
