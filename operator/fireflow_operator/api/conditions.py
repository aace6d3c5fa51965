"""Status vocabulary: phases, condition types and their predeclared reasons, and pure status transitions."""

from __future__ import annotations

import datetime
from typing import Any

# Phases (status.phase), with the reason in status.phaseReason.
PENDING = "Pending"
MIGRATING = "Migrating"
RUNNING = "Running"
DEGRADED = "Degraded"

# Condition types.
READY = "Ready"
PROGRESSING = "Progressing"
SCHEMA_READY = "SchemaReady"
CONNECTION_BUDGET = "ConnectionBudget"
DEGRADED_CONDITION = "Degraded"
CONDITION_TYPES = (READY, PROGRESSING, SCHEMA_READY, CONNECTION_BUDGET, DEGRADED_CONDITION)

# Reasons. Every condition a user sees carries one of these.
REASON_ALL_READY = "AllReplicasReady"
REASON_REPLICAS_NOT_READY = "ReplicasNotReady"
REASON_SCALED_TO_ZERO = "ScaledToZero"
REASON_ROLLING_OUT = "RollingOut"
REASON_STABLE = "Stable"
REASON_PLANNING = "PlanningMigration"
REASON_DRAINING = "DrainingForMigration"
REASON_MIGRATING = "ApplyingMigration"
REASON_SCHEMA_CURRENT = "SchemaCurrent"
REASON_MIGRATION_FAILED = "MigrationFailed"
REASON_PLAN_FAILED = "MigrationPlanFailed"
REASON_MIGRATION_ABANDONED = "MigrationAbandoned"
REASON_WITHIN_BUDGET = "WithinBudget"
REASON_OVER_BUDGET = "OverBudget"
REASON_DATABASE_UNREACHABLE = "DatabaseUnreachable"
REASON_DATABASE_QUERY_FAILED = "DatabaseQueryFailed"
REASON_RUNS_NOT_RECOVERED = "RunsNotRecovered"
REASON_DELETING = "Deleting"  # the finalizer waits for the workers to exit or the database to answer
REASON_INVALID_SPEC = "InvalidSpec"
REASON_SECRET_MISSING = "SecretMissing"
REASON_APPLICATION_CONFLICT = "ApplicationNameConflict"
REASON_SECRET_NOT_SHARED = "SecretNotShared"
REASON_SERVICE_ACCOUNT_NOT_ALLOWED = "ServiceAccountNotAllowed"
REASON_INVALID_DATABASE_URL = "InvalidDatabaseURL"
REASON_QUEUE_SETTINGS_CONFLICT = "QueueSettingsConflict"
REASON_SHARD_CONFLICT = "ServerSharedAcrossShards"  # pools of one PostgreSQL server under two operators
REASON_SELECTED_TWICE = "SelectedByTwoOperators"  # an event: another operator reconciled the pool too
REASON_ROLLOUT_STUCK = "RolloutStuck"
REASON_HEALTHY = "Healthy"
# Besides these, Degraded and Ready carry a pod's own reason when a pod cannot run (health.py):
# ImagePullBackOff, ErrImagePull, CrashLoopBackOff, CreateContainerConfigError, Unschedulable, FailedCreate...


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(
    conditions: list[dict[str, Any]], kind: str, status: bool | None, reason: str, message: str, generation: int
) -> list[dict[str, Any]]:
    """The conditions with `kind` set; lastTransitionTime moves only when the status itself changes."""
    value = "Unknown" if status is None else ("True" if status else "False")
    previous = next((c for c in conditions if c.get("type") == kind), None)
    transition = (
        previous["lastTransitionTime"]
        if previous is not None and previous.get("status") == value and "lastTransitionTime" in previous
        else now_iso()
    )
    updated = {
        "type": kind,
        "status": value,
        "reason": reason,
        "message": message,
        "lastTransitionTime": transition,
        "observedGeneration": generation,
    }
    others = [c for c in conditions if c.get("type") != kind]
    return sorted(
        [*others, updated], key=lambda c: CONDITION_TYPES.index(c["type"]) if c["type"] in CONDITION_TYPES else 99
    )


def condition(conditions: list[dict[str, Any]], kind: str) -> dict[str, Any] | None:
    return next((c for c in conditions if c.get("type") == kind), None)


def transitions(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Conditions whose status or reason changed: each becomes an event."""
    changed = []
    for cond in new:
        before = condition(old, cond["type"])
        if before is None or (before.get("status"), before.get("reason")) != (cond["status"], cond["reason"]):
            changed.append(cond)
    return changed
