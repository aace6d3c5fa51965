"""Which of a pool's migration Jobs the gate looks at, which still run, and which can go (pure).

Finished Jobs are deleted once the status that recorded their outcome has been written (the caller passes
the status as it was read, never the one being built), except the newest failed one, kept for its logs. A
plan Job still running for a target the spec no longer names goes too: a plan only reads, its answer is no
longer wanted, and one that cannot start (an image that cannot be pulled) would otherwise retry for good and
keep the pool reported as degraded after the image was reverted. A running apply Job is never deleted.
"""

from __future__ import annotations

from dataclasses import dataclass

from fireflow_operator.api import names
from fireflow_operator.migration import machine


@dataclass(frozen=True)
class MigrationJob:
    name: str
    mode: str  # "plan" or "apply"
    state: machine.JobState  # never "absent"
    created: str  # creationTimestamp, RFC 3339: sorts by time
    target: str  # the rollout target it migrates to (its label)
    online: bool = False  # an apply started while the pool kept serving


def round_job_names(pool_name: str, saved: dict[str, object]) -> dict[str, str]:
    """The names of the Jobs of the round recorded in `saved` (status.migration)."""
    target = str(saved.get("target", ""))
    round_ = machine.job_round(saved)
    return {mode: names.migration_job_name(pool_name, mode, target, round_) for mode in ("plan", "apply")}


def stale_apply(jobs: list[MigrationJob], current_apply: str) -> MigrationJob | None:
    """A running apply Job that is not the current round's (an offline one first: it holds the pool)."""
    running = [j for j in jobs if j.mode == "apply" and j.state == "running" and j.name != current_apply]
    return min(running, key=lambda j: (j.online, j.name), default=None)


def jobs_to_delete(
    jobs: list[MigrationJob],
    pool_name: str,
    persisted: dict[str, object],
    spec_target: str,
    working: dict[str, object] | None = None,
) -> list[str]:
    """Finished Jobs whose outcome the persisted status already holds, but the newest failed one; and running
    plan Jobs of a target other than `spec_target`. The Jobs of the round the gate works on now (`working`,
    the step's status.migration) stay too: a round the status never recorded (its write lost, the operator
    killed after the create) names Jobs that may have finished already, and the gate adopts their outcome;
    deleting one would make it create the same Job again, running its plan or apply twice."""
    keep: set[str] = set()
    for status in (persisted, working or {}):
        if status.get("phase") in machine.IN_FLIGHT:
            keep |= set(round_job_names(pool_name, status).values())
    failed = sorted((j for j in jobs if j.state == "failed"), key=lambda j: (j.created, j.name))
    if failed:
        keep.add(failed[-1].name)
    unwanted_plans = {j.name for j in jobs if j.mode == "plan" and j.state == "running" and j.target != spec_target}
    finished = {j.name for j in jobs if j.state != "running" and j.name not in keep}
    return sorted(finished | unwanted_plans)
