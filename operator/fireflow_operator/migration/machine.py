"""The migration gate as a pure state machine: plan -> (apply | drain -> apply) -> roll out, or fail and retry.

For every new rollout target (image, application version) a plan Job runs the *new* image's
`migrate --plan`. Behind, with strategy Online (the default) and a step the plan calls online-safe: the
apply Job runs while the previous version keeps serving (its lock timeout keeps the workers from queueing
behind its DDL). Behind otherwise (strategy Offline, or a step that is not online-safe): the pool is held at
zero replicas, and once no pod is left the apply Job runs. Only the apply's success lets a pod of the new
target start. Not behind: an ordinary rolling update.

What the gate does is said in `migration.message`: SchemaReady's message while a migration is in flight and
when it ends, so that SchemaReady's transition (status.py) is the one event of each step.

Invariants (tested against sequences of user actions in tests/operator/test_sequences.py):
- while an offline apply Job of the pool runs, whatever target it was for, the pool is held at zero;
- an apply Job starts only when no worker of the pool is left and no other apply Job on the same
  database runs;
- a target is rolled out only after its plan said "current", or its apply succeeded, or the database's
  schema is already at what the target's plan requires (another pool migrated it).

A failed plan or apply releases the hold (the previous target keeps serving at its size) and is retried
after a back-off as a new round, whose Jobs have new deterministic names; after `maxAttempts` the
migration is abandoned until the target or `spec.migration` changes. Reverting to the rolled-out target
needs no migration: the schema only moves forward, and every DBOS release accepts a newer schema.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from fireflow_contract.migration_summary import MigrationSummary

PLANNING = "Planning"
DRAINING = "Draining"
APPLYING = "Applying"
FAILED = "Failed"
ABANDONED = "Abandoned"
DONE = "Done"
IN_FLIGHT = (PLANNING, DRAINING, APPLYING)

JobState = Literal["absent", "running", "succeeded", "failed"]
JobMode = Literal["plan", "apply"]


@dataclass(frozen=True)
class JobObservation:
    state: JobState
    summary: MigrationSummary | None = None  # the line `fireflow-worker migrate` left as termination message
    message: str = ""

    @property
    def error(self) -> str:
        if self.summary and self.summary.error:
            return self.summary.error
        return self.message or "the Job failed without a message"

    @property
    def ok(self) -> bool:
        return self.state == "succeeded" and self.summary is not None and self.summary.ok


ABSENT = JobObservation("absent")


@dataclass(frozen=True)
class MigrationInput:
    target: str
    current_target: str | None  # the target the StatefulSet runs; None before the first rollout
    migration: dict[str, Any]  # status.migration as last written
    plan_job: JobObservation  # the current round's plan Job
    apply_job: JobObservation  # the current round's apply Job
    stale_apply_running: str | None  # this pool's apply Job of an earlier target or round, still running
    database_apply_running: str | None  # another pool's apply Job on the same database, running
    schema_version: int  # the database's schema version as the operator read it now
    pods_left: int
    now: float
    spec_key: str  # target + spec.migration: changing it restarts an abandoned migration
    max_attempts: int = 3
    retry_base_seconds: float = 30.0
    offline: bool = False  # spec.migration.strategy Offline: always drain; Online: drain only an unsafe step
    stale_apply_online: bool = False  # the stale apply Job runs online (the pool kept serving while it started)


@dataclass(frozen=True)
class MigrationStep:
    migration: dict[str, Any]
    create_job: JobMode | None = None
    hold_at_zero: bool = False
    roll_out: bool = False
    schema_version: int | None = None
    failure: str | None = None
    abandoned: bool = False


PLAN_MESSAGE = "a plan Job of the target image compares the database's schema version with the one it requires"


def retry_delay(attempt: int, base: float) -> float:
    return float(min(base * 2 ** (attempt - 1), 600.0))


def job_round(migration: dict[str, Any]) -> int:
    """The round whose Jobs the gate looks at (status written by older operators has only `attempt`)."""
    return int(migration.get("round", migration.get("attempt", 1)))


def _new_round(m: dict[str, Any], inp: MigrationInput, attempt: int) -> MigrationStep:
    fresh = {
        "target": inp.target,
        "phase": PLANNING,
        "round": job_round(m) + 1 if m else 1,
        "attempt": attempt,
        "specKey": inp.spec_key,
        # What SchemaReady says until the plan answers (never a message left from an earlier round).
        "message": (f"attempt {attempt} of {inp.max_attempts}: " if attempt > 1 else "") + PLAN_MESSAGE,
    }
    if "replicasBefore" in m:
        fresh["replicasBefore"] = m["replicasBefore"]
    return MigrationStep(fresh, create_job="plan")


def _failed(m: dict[str, Any], inp: MigrationInput, what: str, error: str) -> MigrationStep:
    attempt = int(m.get("attempt", 1))
    if attempt >= inp.max_attempts:
        message = (
            f"{what} attempt {attempt} of {inp.max_attempts} failed: {error}; abandoned until spec.image, "
            f"spec.dbos.applicationVersion or spec.migration changes"
        )
        abandoned = {**m, "phase": ABANDONED, "message": message}
        abandoned.pop("retryAt", None)
        return MigrationStep(abandoned, failure=message, abandoned=True)
    delay = retry_delay(attempt, inp.retry_base_seconds)
    message = f"{what} attempt {attempt} of {inp.max_attempts} failed: {error}; retrying in {int(delay)} s"
    failed = {**m, "phase": FAILED, "message": message, "retryAt": inp.now + delay}
    return MigrationStep(failed, failure=message)


def _done(m: dict[str, Any], message: str, version: int | None) -> MigrationStep:
    done = {**m, "phase": DONE, "message": message}
    done.pop("retryAt", None)
    return MigrationStep(done, roll_out=True, schema_version=version)


def _planned(m: dict[str, Any], inp: MigrationInput) -> MigrationStep:
    """The plan Job finished: roll out, wait for another migration, or drain for ours."""
    plan = inp.plan_job
    if plan.state == "failed" or not plan.ok:
        return _failed(m, inp, "migration plan", plan.error)
    assert plan.summary is not None
    required = plan.summary.required_version or 0
    m = {**m, "requiredVersion": required}
    if not plan.summary.migration_needed or inp.schema_version >= required:
        version = max(inp.schema_version, plan.summary.current_version or 0)
        return _done(m, f"schema {version} is current: rolling update", version)
    if inp.database_apply_running:
        waiting = f"schema {inp.schema_version} is behind {required}; waiting for {inp.database_apply_running}"
        return MigrationStep({**m, "message": waiting})
    unsafe = "; ".join(str(u) for u in plan.summary.unsafe or [])
    if not inp.offline and plan.summary.online_safe:
        message = f"schema {inp.schema_version} is behind {required}: applying online, the pool keeps serving"
        online = {**m, "phase": APPLYING, "online": True, "message": message}
        return MigrationStep(online, create_job="apply")
    why = (
        "spec.migration.strategy is Offline" if inp.offline else f"the step is not online-safe ({unsafe or 'unknown'})"
    )
    message = f"schema {inp.schema_version} is behind {required}: draining the pool, as {why}"
    return MigrationStep({**m, "phase": DRAINING, "message": message}, hold_at_zero=True)


def next_step(inp: MigrationInput) -> MigrationStep:
    m = dict(inp.migration)
    phase = m.get("phase")
    ours = m.get("target") == inp.target
    offline_apply = not m.get("online")
    if inp.apply_job.state == "running":
        # Whatever the status says (its last write may have been lost) and whatever the spec says now.
        return MigrationStep({**m, "phase": APPLYING} if ours else m, hold_at_zero=offline_apply)
    if inp.stale_apply_running:
        # An apply Job of an earlier target (or round) still runs: under Offline no worker may start until it
        # ends, whatever the spec says now; a new round waits for it either way.
        message = f"waiting for {inp.stale_apply_running}"
        return MigrationStep({**m, "message": message}, hold_at_zero=not inp.stale_apply_online)
    if inp.current_target == inp.target and (phase not in IN_FLIGHT or not ours):
        kept = {k: v for k, v in m.items() if k in ("round", "replicasBefore")}
        return MigrationStep({**kept, "target": inp.target, "phase": DONE, "specKey": inp.spec_key})
    if not ours:
        return _new_round(m, inp, attempt=1)
    if phase in (FAILED, ABANDONED) and m.get("specKey") != inp.spec_key:
        return _new_round(m, inp, attempt=1)
    if phase == PLANNING:
        if inp.plan_job.state == "absent":
            return MigrationStep(m, create_job="plan")
        if inp.plan_job.state == "running":
            return MigrationStep(m)
        return _planned(m, inp)
    required = int(m.get("requiredVersion") or 0)
    if phase == DRAINING:
        if required and inp.schema_version >= required:
            return _done(m, f"schema {inp.schema_version} is current: rolling update", required)
        if inp.pods_left > 0:
            return MigrationStep(m, hold_at_zero=True)
        if inp.database_apply_running:
            return MigrationStep({**m, "message": f"waiting for {inp.database_apply_running}"}, hold_at_zero=True)
        message = f"no worker left: migrating schema {inp.schema_version} to {required}"
        return MigrationStep({**m, "phase": APPLYING, "message": message}, create_job="apply", hold_at_zero=True)
    if phase == APPLYING:
        apply = inp.apply_job
        if apply.state == "absent":
            if inp.database_apply_running:
                return MigrationStep(m, hold_at_zero=offline_apply)
            return MigrationStep(m, create_job="apply", hold_at_zero=offline_apply)
        if apply.state == "failed" or not apply.ok:
            return _failed(m, inp, "migration", apply.error)
        assert apply.summary is not None
        version = apply.summary.current_version
        return _done(m, f"migrated to schema {version}", version)
    if phase == FAILED:
        if inp.now < float(m.get("retryAt", 0)):
            return MigrationStep(m, failure=str(m.get("message", "")))
        return _new_round(m, inp, attempt=int(m.get("attempt", 1)) + 1)
    if phase == ABANDONED:
        return MigrationStep(m, failure=str(m.get("message", "")), abandoned=True)
    # DONE for a target not yet rolled out (the rollout is applied by the caller).
    return MigrationStep(m, roll_out=True)
