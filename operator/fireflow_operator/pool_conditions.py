"""The pool's conditions and phase from what the reconcile observed and decided (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field

from fireflow_operator.api import conditions as c
from fireflow_operator.migration import machine
from fireflow_operator.migration.machine import MigrationStep

_IN_FLIGHT_REASONS = {
    machine.PLANNING: c.REASON_PLANNING,
    machine.DRAINING: c.REASON_DRAINING,
    machine.APPLYING: c.REASON_MIGRATING,
}


@dataclass(frozen=True)
class Summary:
    phase: str
    reason: str
    progressing: bool
    conditions: list[tuple[str, bool | None, str, str]] = field(default_factory=list)


def _failure_reason(step: MigrationStep) -> str:
    if step.abandoned:
        return c.REASON_MIGRATION_ABANDONED
    return c.REASON_PLAN_FAILED if str(step.failure).startswith("migration plan") else c.REASON_MIGRATION_FAILED


def summarize(
    step: MigrationStep,
    *,
    schema_version: int | None,
    target: int,
    replicas: int,
    ready: int,
    updated: int,
    over_budget: str | None = None,
    pod_problem: tuple[str, str] | None = None,
    stuck: str | None = None,
) -> Summary:
    """`over_budget`: why the pool runs fewer workers than it asks for (the budget's explanation);
    `pod_problem`: (reason, message) of a pod that cannot run, in the pod's own words."""
    phase_name = str(step.migration.get("phase"))
    conds: list[tuple[str, bool | None, str, str]] = []
    if step.failure:
        reason = _failure_reason(step)
        conds += [(c.SCHEMA_READY, False, reason, step.failure), (c.DEGRADED_CONDITION, True, reason, step.failure)]
    elif phase_name == machine.DONE:
        said = step.migration.get("message") or f"schema version {schema_version}"  # how it became current, if now
        conds.append((c.SCHEMA_READY, True, c.REASON_SCHEMA_CURRENT, str(said)))
    else:
        reason = _IN_FLIGHT_REASONS[phase_name]
        conds.append((c.SCHEMA_READY, False, reason, str(step.migration.get("message") or reason)))
    if pod_problem and not step.failure:
        conds.append((c.DEGRADED_CONDITION, True, *pod_problem))
    elif over_budget and not step.failure:
        conds.append((c.DEGRADED_CONDITION, True, c.REASON_OVER_BUDGET, over_budget))
    elif not step.failure:
        conds.append((c.DEGRADED_CONDITION, False, c.REASON_HEALTHY, "no problem found"))
    rolled = updated >= target and replicas == target
    progressing = phase_name != machine.DONE or not rolled or ready != target
    conds.append((
        c.PROGRESSING, progressing, c.REASON_ROLLING_OUT if progressing else c.REASON_STABLE,
        f"{ready}/{target} ready, migration {phase_name}",
    ))  # fmt: skip
    counts = f"{ready}/{target} replicas ready"
    if over_budget and not progressing:
        conds.append((c.READY, False, c.REASON_OVER_BUDGET, f"{counts}; held below the requested size: {over_budget}"))
        phase, phase_reason = c.DEGRADED, c.REASON_OVER_BUDGET
    elif not progressing:
        reason = c.REASON_ALL_READY if target else c.REASON_SCALED_TO_ZERO
        conds.append((c.READY, True, reason, counts))
        phase, phase_reason = c.RUNNING, reason
    else:
        doing = "rollout in progress" if phase_name == machine.DONE else f"migration {phase_name}"
        conds.append((c.READY, False, c.REASON_REPLICAS_NOT_READY, f"{counts}; {doing}"))
        phase, phase_reason = (
            (c.PENDING, c.REASON_REPLICAS_NOT_READY) if phase_name == machine.DONE else (c.MIGRATING, phase_name)
        )
    if pod_problem and not step.failure:
        conds = [cond for cond in conds if cond[0] != c.READY]
        conds.append((c.READY, False, *pod_problem))
        phase, phase_reason = c.DEGRADED, pod_problem[0]
    if stuck and not step.failure:
        conds = [cond for cond in conds if cond[0] not in (c.PROGRESSING, c.DEGRADED_CONDITION)]
        conds += [
            (c.PROGRESSING, False, c.REASON_ROLLOUT_STUCK, stuck),
            (c.DEGRADED_CONDITION, True, c.REASON_ROLLOUT_STUCK, stuck),
        ]
        phase, phase_reason = c.DEGRADED, c.REASON_ROLLOUT_STUCK
    if step.failure:
        phase, phase_reason = c.DEGRADED, _failure_reason(step)
    return Summary(phase, phase_reason, progressing, conds)
