"""The FireflowWorkerPool status as a typed model, the single source of the CRD's status schema (pure).

Every field has one owner, the module that writes it (`OWNERS`, checked by tests/unit/test_pool_status.py
against the code), so a field never carries two meanings. `crd.py` generates the status schema from this
model (complete: the API server prunes any field missing here, so a write of an undeclared field is lost, and
the model test catches it first).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class StatusModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class Condition(StatusModel):
    type: str = Field(description="The condition's name: Ready, Progressing, SchemaReady, ConnectionBudget, Degraded.")
    status: Literal["True", "False", "Unknown"] = Field(description="Its state.")
    reason: str | None = Field(None, description="Why, in one CamelCase word.")
    message: str | None = Field(None, description="Why, in a sentence naming what to do.")
    last_transition_time: str | None = Field(
        None, description="When its status last changed (RFC 3339).", json_schema_extra={"format": "date-time"}
    )
    observed_generation: int | None = Field(None, description="The metadata.generation it was computed for.")


class MigrationStatus(StatusModel):
    """The migration gate's state machine (migration/machine.py; sizing.py keeps replicasBefore)."""

    target: str | None = Field(None, description="The rollout target (image and application version) it is for.")
    phase: Literal["Planning", "Draining", "Applying", "Failed", "Abandoned", "Done"] | None = Field(
        None, description="Planning, Draining, Applying, Failed, Abandoned or Done."
    )
    round: int | None = Field(None, description="Grows with every plan: part of the migration Jobs' names.")
    attempt: int | None = Field(None, description="The attempt of this target, up to spec.migration.maxAttempts.")
    spec_key: str | None = Field(None, description="Digest of the target and spec.migration an abandonment waits on.")
    online: bool | None = Field(None, description="The apply runs while the pool keeps serving.")
    message: str | None = Field(None, description="What the gate is doing or why it failed.")
    retry_at: float | None = Field(None, description="When a failed attempt is retried (Unix seconds).")
    required_version: int | None = Field(None, description="The DBOS schema version the target's plan requires.")
    replicas_before: int | None = Field(
        None, description="The replicas the pool had before a drain held it at zero (capacity/sizing.py)."
    )


class PreviousTarget(StatusModel):
    target: str = Field(description="The target rolled out before this one.")
    image: str = Field(description="Its worker image.")
    application_version: str = Field(description="Its DBOS application version.")


class RolloutStatus(StatusModel):
    """The latest rollout and its progress deadline (rollout/progress.py)."""

    target: str = Field(description="The target being rolled out.")
    image: str = Field(description="Its worker image.")
    application_version: str = Field(description="Its DBOS application version.")
    started_at: float = Field(description="When it started (Unix seconds).")
    state: Literal["Progressing", "Complete", "Stuck", "RolledBack"] = Field(
        description="Progressing, Complete, Stuck (past spec.rollout.progressDeadlineSeconds) or RolledBack."
    )
    message: str | None = Field(None, description="Why it is stuck or was rolled back.")
    previous: PreviousTarget | None = Field(None, description="What a rollback restores.")


class RunsLeft(StatusModel):
    pending: int = Field(description="Its PENDING runs, as the database counts them.")
    enqueued: int = Field(description="Its ENQUEUED runs.")


class VersionStatus(StatusModel):
    """One application version and its StatefulSet (rollout/versions.py; rollout/fleet.py adds what it observed)."""

    application_version: str = Field(description="The DBOS application version.")
    index: int = Field(description="0 for the StatefulSet named after the pool, N for <pool>-vN.")
    image: str = Field(description="The worker image of its pods.")
    state: Literal["Current", "Retiring"] = Field(description="Current, or Retiring until its runs are done.")
    max_replicas: int | None = Field(None, description="A retiring version's size when it was last current.")
    retiring_since: float | None = Field(None, description="When it started retiring (Unix seconds).")
    forked: bool | None = Field(None, description="Its runs left after spec.rollout.retireAfterSeconds were forked.")
    stateful_set: str | None = Field(None, description="The StatefulSet of its pods.")
    replicas: int | None = Field(None, description="Its pods.")
    ready_replicas: int | None = Field(None, description="Its pods that are Ready.")
    runs_left: RunsLeft | None = Field(None, description="A retiring version's runs left.")


class ConnectionBudgetStatus(StatusModel):
    """The connection budget's last decision (capacity/budget.py, written by capacity/sizing.py)."""

    server: str = Field(description="The server's identity (its system identifier, else host:port).")
    database: str = Field(description="The pool's database.")
    role: str = Field(description="The pool's database role.")
    max_connections: int = Field(description="The server's max_connections.")
    reserved_by_server: int = Field(description="Slots the server reserves (superuser and reserved connections).")
    headroom: int = Field(description="Connections the operator leaves free for other clients.")
    others_in_use: int = Field(description="Connections in use by clients that are neither pools nor the operator.")
    other_pools: int = Field(description="Connections other pools on the server may hold.")
    migration_job: int = Field(description="Connections a migration Job holds.")
    operator_connection: int | None = Field(
        None,
        description="The operator's connections to the database, kept between reconciles and shared by its pools.",
    )
    database_limit: int = Field(description="The database's connection limit (-1: none).")
    role_limit: int = Field(description="The role's connection limit (-1: none).")
    limited_by: str = Field(description="The scope whose limit binds: server, database or role.")
    per_replica: int = Field(description="Connections one worker pod may hold.")
    max_replicas: int = Field(
        description="The most replicas the budget allows (as of the budget's last different decision while the "
        "pool is within it: others' usage alone does not rewrite the status)."
    )
    desired_replicas: int = Field(description="The replicas asked for.")
    allowed_replicas: int = Field(description="The replicas of the current version allowed.")
    retiring_replicas: int = Field(description="Replicas of retiring versions, counted beside them.")
    needed: int = Field(description="Connections the pool's workers may hold at the allowed size.")


class ReconciledBy(StatusModel):
    """The operator that reconciles the pool (admission/shards.py): another one finding it reports two selecting it."""

    lease: str = Field(description="Its leader Lease as namespace/name (empty without leader election).")
    pool_selector: str = Field(description="Its FIREFLOW_OPERATOR_POOL_SELECTOR, key=value,... (empty: every pool).")
    namespaces: list[str] = Field(description="Its FIREFLOW_OPERATOR_NAMESPACES (empty: every namespace).")


class PoolStatus(StatusModel):
    """What the operator observed and did; written by the operator only."""

    phase: Literal["Pending", "Migrating", "Running", "Degraded"] | None = Field(
        None, description="Pending, Migrating, Running or Degraded (reconcile.py)."
    )
    phase_reason: str | None = Field(None, description="Why the pool is in its phase: one of the condition reasons.")
    observed_generation: int | None = Field(None, description="The metadata.generation this status is about.")
    replicas: int | None = Field(None, description="Worker pods of the current version (the /scale status).")
    ready_replicas: int | None = Field(None, description="Worker pods of the current version that are Ready.")
    desired_replicas: int | None = Field(
        None,
        description="Workers the operator runs: spec.replicas, or fewer when the connection budget or a "
        "migration holds the pool (capacity/sizing.py).",
    )
    selector: str | None = Field(None, description="Label selector of the current version's pods (for /scale).")
    schema_version: int | None = Field(None, description="The DBOS schema version of the pool's database.")
    required_schema_version: int | None = Field(
        None, description="The DBOS schema version the target image needs, once planned (migration/gate.py)."
    )
    target_image: str | None = Field(None, description="The image being rolled out (spec.image, once let through).")
    current_target: str | None = Field(
        None, description="The target the current version runs, once the migration gate rolled it out."
    )
    current_image: str | None = Field(None, description="The worker image the current version runs.")
    current_application_version: str | None = Field(None, description="The DBOS application version it runs.")
    latest_version: str | None = Field(
        None, description="The application version made DBOS's latest, for version-less runs (rollout/fleet.py)."
    )
    recovered_runs: int | None = Field(
        None, description="PENDING runs of departed workers handed back to their queue, in total (rollout/fleet.py)."
    )
    conditions: list[Condition] | None = Field(
        None,
        description="Ready, Progressing, SchemaReady, ConnectionBudget and Degraded.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    migration: MigrationStatus | None = Field(None, description="The migration gate's state for the target.")
    rollout: RolloutStatus | None = Field(None, description="The latest rollout and its progress deadline.")
    versions: list[VersionStatus] | None = Field(None, description="Every application version that has pods.")
    connection_budget: ConnectionBudgetStatus | None = Field(None, description="The connection budget's decision.")
    network_policy: str | None = Field(
        None, description="The NetworkPolicy the operator keeps for the pool, while spec.networkPolicy asks for one."
    )
    reconciled_by: ReconciledBy | None = Field(
        None, description="The operator that reconciled the pool last: its Lease and what it selects."
    )


def parse_status(status: dict[str, Any]) -> PoolStatus:
    """The status as the model reads it (raises pydantic's ValidationError naming an undeclared field)."""
    return PoolStatus.model_validate(status)


# The one module of fireflow_operator that writes each status field. The pure modules decide (the gate, the
# budget, the rollout's progress); `reconcile` writes what they return, `status` keeps the conditions (each
# condition type set by the part that judges it) and the generation.
OWNERS: dict[str, str] = {
    "phase": "reconcile",
    "phaseReason": "reconcile",
    "observedGeneration": "status",
    "replicas": "reconcile",
    "readyReplicas": "reconcile",
    "desiredReplicas": "capacity.sizing",
    "selector": "reconcile",
    "schemaVersion": "reconcile",
    "requiredSchemaVersion": "migration.gate",
    "targetImage": "reconcile",
    "currentTarget": "reconcile",
    "currentImage": "reconcile",
    "currentApplicationVersion": "reconcile",
    "latestVersion": "rollout.fleet",
    "recoveredRuns": "rollout.fleet",
    "conditions": "status",
    "migration": "capacity.sizing",
    "rollout": "reconcile",
    "versions": "reconcile",
    "connectionBudget": "capacity.sizing",
    "networkPolicy": "children.netpol",
    "reconciledBy": "reconcile",
}
