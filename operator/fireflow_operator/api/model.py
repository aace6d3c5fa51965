"""The FireflowWorkerPool spec: one pydantic model, the single source of the CRD's OpenAPI schema.

`crd.py` turns this model into the CRD (`crds/`), so the schema the API server enforces and the model the
operator validates with cannot drift; a test regenerates the CRD and compares. Rules that cross fields
are CEL (`x-kubernetes-validations`), so the API server rejects them before the operator sees them; the
same rules are checked here too, for objects that predate a CRD upgrade.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import ConfigDict, Field, model_validator

from fireflow_contract import queues, worker_variables
from fireflow_contract.executor_ids import processes_for_cpu_limit
from fireflow_operator.api.k8s_types import (
    DNS_SUBDOMAIN,
    ContainerSecurityContext,
    EnvVar,
    K8sModel,
    LabelMap,
    LocalObjectReference,
    PodAnnotationMap,
    PodSecurityContext,
    ResourceRequirements,
    Toleration,
    cpu_cores,
)

GROUP = "fireflow.persistent.ai"
VERSION = "v1alpha1"
KIND = "FireflowWorkerPool"
PLURAL = "fireflowworkerpools"
SHORT_NAME = "ffwp"

QUEUES = queues.ALL_QUEUES
# What a pool's extra env may not set (the contract's worker_variables.RESERVED); a test checks it against what
# builders.worker_env sets.
RESERVED_ENV = worker_variables.RESERVED


# Resources of pods whose pool sets none (spec.resources, spec.migration.resources), unless the operator's
# settings give others: requests so that the scheduler reserves something, a memory limit so that one pod
# cannot take a node's memory, no CPU limit (it would throttle, and a CPU limit sets the processes per pod).
DEFAULT_WORKER_RESOURCES: dict[str, Any] = {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}
DEFAULT_MIGRATION_RESOURCES: dict[str, Any] = {
    "requests": {"cpu": "100m", "memory": "128Mi"},
    "limits": {"memory": "512Mi"},
}

_OPAQUE: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
# The longest child name is a versioned StatefulSet's controller-revision-hash label value,
# "<pool>-v<up to 5 digits>-<10 characters>", which must fit a 63-character label value.
MAX_POOL_NAME = 63 - len("-v99999") - len("-") - 10
POOL_NAME = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"  # a DNS-1035 label: the Service name starts with it
VERSIONED_NAME = r"-v[0-9]+$"  # what names.statefulset_name appends for later application versions


def _k8s_object(description: str, *, array: bool = False) -> Any:
    """A field whose value is a Kubernetes type the API server checks on the children (kept as-is); what it
    refuses there is reported on the pool as InvalidSpec with the API server's message."""
    extra: dict[str, Any] = {"items": _OPAQUE, "maxItems": 32} if array else dict(_OPAQUE)
    return Field(None, description=description, json_schema_extra=extra)


class _Model(K8sModel):
    pass


class ImagePullPolicy(StrEnum):
    ALWAYS = "Always"
    IF_NOT_PRESENT = "IfNotPresent"
    NEVER = "Never"


class BindAddress(StrEnum):
    """Where the workers' endpoint listens. Only the wildcards: the kubelet probes the pod's own IP, which is
    not known before the pod exists, and a loopback address would fail every probe."""

    IPV4 = "0.0.0.0"  # noqa: S104 - every IPv4 address of the pod, which the kubelet's probes reach
    ANY = "::"  # every address: IPv6, and IPv4 too where the node's kernel maps it (the Linux default)


class LogLevel(StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"
    CRITICAL = "critical"


class SecretKeyRef(_Model):
    name: str = Field(description="Secret in the pool's namespace.", min_length=1, max_length=253)
    key: str = Field("url", description="Key holding the postgresql:// URL.", min_length=1, max_length=253)


def _database_rules(schema: dict[str, Any]) -> None:
    """secretRef is required by a CEL rule, not the schema's `required`: the API server reports a missing
    required field alone, which would hide why `url` is refused when a user writes `database: {url: ...}`."""
    schema["required"] = [name for name in schema.get("required", []) if name != "secretRef"]
    if not schema["required"]:
        del schema["required"]
    schema["x-kubernetes-validations"] = [
        {
            "rule": "!has(self.url)",
            "message": "spec.database.url is not allowed: put the URL in a Secret and reference it with "
            "spec.database.secretRef",
        },
        {
            "rule": "has(self.secretRef)",
            "message": "spec.database.secretRef is required: the name (and key, default url) of a Secret in the "
            "pool's namespace holding the postgresql:// URL",
        },
    ]


class DatabaseSpec(_Model):
    """The executions database. The URL is only ever read from a Secret."""

    model_config = ConfigDict(json_schema_extra=lambda schema, _: _database_rules(schema))

    secret_ref: SecretKeyRef = Field(description="Where the postgresql:// URL of the database is.")
    reserved_connections: int = Field(
        10, ge=0, le=10_000, description="Connections kept free for everything that is not a worker pool."
    )
    url: str | None = Field(None, description="Not allowed; exists only to be rejected with a clear message.")


class DbosSpec(_Model):
    """The DBOS settings of the table of the TypeScript FireFlow execution worker's README; defaults are its own."""

    application_name: str = Field(
        "fireflow",
        pattern=r"^[a-z0-9_-]{3,256}$",
        description="DBOS application name; every pool on one database must use the same. Immutable.",
        json_schema_extra={
            "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "applicationName is immutable"}]
        },
    )
    application_version: str = Field(
        "1",
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z0-9._-]+$",
        description="Pinned DBOS application version; change it only for an incompatible engine change.",
    )
    worker_concurrency: int = Field(50, ge=1, le=10_000, description="Runs one worker executes at once.")
    queue_concurrency: int = Field(0, ge=0, le=1_000_000, description="Runs at once across all workers; 0 = no cap.")
    polling_interval_ms: int = Field(50, ge=1, le=600_000, description="Queue polling interval.")
    system_database_pool_size: int = Field(30, ge=2, le=1_000, description="Connections per worker process.")
    worker_processes: int | None = Field(
        None,
        ge=1,
        le=64,
        description="Worker processes per pod, each with its own executor id (<pod id>-p<k> for k >= 1) and "
        "pool. Unset: the container's CPU limit rounded up, 1 without a limit.",
    )
    shutdown_drain_timeout_ms: int = Field(
        25_000, ge=0, le=3_600_000, description="How long SIGTERM waits for running runs."
    )
    log_level: LogLevel = Field(LogLevel.INFO, description="DBOS log level.")
    provision_cache_ttl_ms: int = Field(10_000, ge=0, le=86_400_000, description="Stored-flow cache TTL; 0 = off.")
    sandbox_queue_concurrency: int = Field(10, ge=1, le=10_000, description="Worker concurrency of fireflow-sandbox.")
    terminal_queue_concurrency: int = Field(10, ge=1, le=10_000, description="Worker concurrency of fireflow-terminal.")


class MigrationStrategy(StrEnum):
    ONLINE = "Online"
    OFFLINE = "Offline"


class MigrationSpec(_Model):
    strategy: MigrationStrategy = Field(
        MigrationStrategy.ONLINE,
        description="Online: apply while the previous version serves (a step the plan Job finds unsafe drains "
        "the pool instead); Offline: drain the pool to zero for every migration.",
    )
    lock_timeout_ms: int = Field(
        5_000, ge=100, le=600_000, description="lock_timeout of the migration's database connections."
    )
    retries: int = Field(3, ge=0, le=100, description="Retries of a lock timeout inside one migration attempt.")
    deadline_seconds: int = Field(600, ge=30, le=86_400, description="activeDeadlineSeconds of a migration Job.")
    max_attempts: int = Field(
        3,
        ge=1,
        le=100,
        description="Attempts (plan and apply, with back-off) before the migration is abandoned until the "
        "image, the application version or spec.migration changes.",
    )
    resources: ResourceRequirements | None = Field(
        None,
        description="Resources of the migration Jobs' container. Unset: the operator's default (docs/security.md).",
    )


class RolloutSpec(_Model):
    progress_deadline_seconds: int = Field(
        600,
        ge=10,
        le=86_400,
        description="A new target whose workers are not all Ready this long after it rolled out is reported "
        "(Progressing=False, RolloutStuck).",
    )
    auto_rollback: bool = Field(
        False, description="Restore the previous target when the progress deadline passes (until the spec changes)."
    )
    retire_after_seconds: int | None = Field(
        None,
        ge=0,
        le=31_536_000,
        description="Fork the runs an older application version still has after this long onto the current one. "
        "Unset: wait for them to finish.",
    )


class PodDisruptionBudgetSpec(_Model):
    enabled: bool = Field(True, description="Create a PodDisruptionBudget (never with fewer than 2 replicas).")
    max_unavailable: int = Field(1, ge=1, le=1_000, description="Pods a voluntary disruption may take at once.")


class NetworkPolicySpec(_Model):
    """A NetworkPolicy over the pool's pods (workers and migration Jobs); needs a CNI that enforces it."""

    enabled: bool = Field(False, description="Create a NetworkPolicy for the pool's pods.")
    metrics_from: list[dict[str, Any]] | None = _k8s_object(
        "NetworkPolicyPeers that may reach the workers' health and metrics port (unset: nobody; the kubelet's "
        "probes are not subject to NetworkPolicies).",
        array=True,
    )
    database_to: list[dict[str, Any]] | None = _k8s_object(
        "NetworkPolicyPeers of the database (unset: any address on databasePorts).", array=True
    )
    database_ports: list[Annotated[int, Field(ge=1, le=65_535)]] = Field(
        default_factory=lambda: [5432],
        min_length=1,
        max_length=8,
        description="TCP ports of the database.",
        json_schema_extra={"default": [5432]},
    )
    extra_egress: list[dict[str, Any]] | None = _k8s_object(
        "More NetworkPolicyEgressRules, such as the services the flows' HTTP nodes call (DNS and the database "
        "are always allowed).",
        array=True,
    )


class PoolSpec(_Model):
    """Desired state of a FireflowWorkerPool."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.dbos.shutdownDrainTimeoutMs < self.terminationGracePeriodSeconds * 1000",
                    "message": "spec.dbos.shutdownDrainTimeoutMs must be below "
                    "spec.terminationGracePeriodSeconds (in ms), or pods are killed mid-drain",
                }
            ]
        }
    )

    image: str = Field(min_length=1, max_length=512, pattern=r"^\S+$", description="The worker image.")
    image_pull_policy: ImagePullPolicy = Field(ImagePullPolicy.IF_NOT_PRESENT, description="Image pull policy.")
    image_pull_secrets: list[LocalObjectReference] | None = Field(
        None, max_length=16, description="Secrets to pull the image with."
    )
    replicas: int | None = Field(
        None, ge=0, le=1_000, description="Desired workers. Unset: an autoscaler owns the count (see /scale)."
    )
    database: DatabaseSpec = Field(description="The executions database.")
    dbos: DbosSpec = Field(
        default_factory=lambda: DbosSpec.model_validate({}),
        description="DBOS settings (the TypeScript FireFlow execution worker's env table).",
    )
    queues: list[str] = Field(
        default_factory=lambda: list(QUEUES),
        min_length=1,
        max_length=4,
        description="Queues this pool serves.",
        json_schema_extra={
            "items": {"type": "string", "enum": list(QUEUES)},
            "x-kubernetes-list-type": "set",
            "default": list(QUEUES),
        },
    )
    migration: MigrationSpec = Field(
        default_factory=lambda: MigrationSpec.model_validate({}), description="Schema migration settings."
    )
    rollout: RolloutSpec = Field(
        default_factory=lambda: RolloutSpec.model_validate({}), description="Rollouts of new targets and versions."
    )
    termination_grace_period_seconds: int = Field(30, ge=1, le=86_400, description="Pod termination grace period.")
    pod_disruption_budget: PodDisruptionBudgetSpec = Field(
        default_factory=lambda: PodDisruptionBudgetSpec.model_validate({}),
        description="PodDisruptionBudget of the pool.",
    )
    network_policy: NetworkPolicySpec = Field(
        default_factory=lambda: NetworkPolicySpec.model_validate({}),
        description="An optional NetworkPolicy of the pool's pods.",
    )
    bind_address: BindAddress = Field(
        BindAddress.IPV4,
        description="Address the workers' health and metrics endpoint (/healthz, /readyz, /metrics on port 8080) "
        "binds to: 0.0.0.0 (every IPv4 address) or :: (every address, for IPv6 and dual-stack clusters).",
    )
    resources: ResourceRequirements | None = Field(
        None,
        description="Worker container resources (requests/limits). Unset: the operator's default (docs/security.md).",
    )
    node_selector: LabelMap | None = Field(None, description="Pod node selector.")
    tolerations: list[Toleration] | None = Field(None, max_length=32, description="Pod tolerations.")
    affinity: dict[str, Any] | None = _k8s_object("Pod affinity.")
    topology_spread_constraints: list[dict[str, Any]] | None = _k8s_object(
        "Pod topology spread constraints.", array=True
    )
    pod_annotations: PodAnnotationMap | None = Field(
        None, description="Extra pod annotations (none that chooses an AppArmor or seccomp profile)."
    )
    pod_labels: LabelMap | None = Field(None, description="Extra pod labels (never the selector's).")
    service_account_name: str | None = Field(
        None,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description="Service account of the pods: only one the operator's settings allow (docs/security.md).",
    )
    priority_class_name: str | None = Field(
        None, max_length=253, pattern=DNS_SUBDOMAIN, description="Priority class of the pods."
    )
    security_context: ContainerSecurityContext | None = Field(
        None, description="Container security context, within the restricted Pod Security Standard."
    )
    pod_security_context: PodSecurityContext | None = Field(
        None, description="Pod security context, within the restricted Pod Security Standard."
    )
    env: list[EnvVar] | None = Field(
        None,
        max_length=100,
        description="Extra environment variables of the worker container.",
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.all(e, !(e.name in " + str(list(RESERVED_ENV)).replace("'", '"') + "))",
                    "message": "spec.env may not set a variable the operator manages: " + ", ".join(RESERVED_ENV),
                }
            ],
        },
    )

    @model_validator(mode="after")
    def _cross_field_rules(self) -> PoolSpec:
        if self.database.url is not None:
            raise ValueError(
                "spec.database.url is not allowed: put the URL in a Secret and reference it with "
                "spec.database.secretRef"
            )
        if self.dbos.shutdown_drain_timeout_ms >= self.termination_grace_period_seconds * 1000:
            raise ValueError(
                "spec.dbos.shutdownDrainTimeoutMs must be below spec.terminationGracePeriodSeconds "
                "(in ms), or pods are killed mid-drain"
            )
        if len(set(self.queues)) != len(self.queues) or not set(self.queues) <= set(QUEUES):
            raise ValueError(f"spec.queues must be distinct names among {', '.join(QUEUES)}")
        reserved = [e.name for e in self.env or [] if e.name in RESERVED_ENV]
        if reserved:
            raise ValueError(f"spec.env may not set a variable the operator manages: {reserved[0]}")
        return self


def worker_processes(spec: PoolSpec) -> int:
    """Processes per pod: spec.dbos.workerProcesses, else the CPU limit rounded up (the worker's own rule for
    `auto`, decided here so the connection budget and the pods agree), else 1."""
    if spec.dbos.worker_processes is not None:
        return spec.dbos.worker_processes
    limit = (spec.resources.limits or {}).get("cpu") if spec.resources is not None else None
    return processes_for_cpu_limit(cpu_cores(limit) if limit is not None else None)


def parse_spec(spec: dict[str, Any]) -> PoolSpec:
    """Validate a pool's spec (raises pydantic.ValidationError)."""
    return PoolSpec.model_validate(spec)
