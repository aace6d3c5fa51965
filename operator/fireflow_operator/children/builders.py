"""Pure builders of the pool's children: dicts in, dicts out, no client and no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from fireflow_contract import executor_ids, worker_variables
from fireflow_operator.api import names
from fireflow_operator.api.model import (
    DEFAULT_MIGRATION_RESOURCES,
    DEFAULT_WORKER_RESOURCES,
    BindAddress,
    PoolSpec,
    worker_processes,
)

WORKER_UID = 10001
WRITABLE_TMP = "/tmp"  # noqa: S108 - an emptyDir, the only writable path under a read-only root
DEFAULT_POD_SECURITY: dict[str, Any] = {
    "runAsNonRoot": True,
    "fsGroup": WORKER_UID,
    "seccompProfile": {"type": "RuntimeDefault"},
}
DEFAULT_CONTAINER_SECURITY: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": WORKER_UID,
    "runAsGroup": WORKER_UID,
    "readOnlyRootFilesystem": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _k8s(value: BaseModel | None) -> dict[str, Any]:
    """A modelled Kubernetes object as the API server spells it (camelCase, unset fields left out)."""
    return value.model_dump(by_alias=True, exclude_none=True, mode="json") if value is not None else {}


@dataclass(frozen=True)
class PodDefaults:
    """What the operator's installer chose for pools that do not choose themselves."""

    worker_resources: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_WORKER_RESOURCES))
    migration_resources: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_MIGRATION_RESOURCES))


@dataclass(frozen=True)
class Pool:
    """What the builders need of a FireflowWorkerPool: identity, owner reference, validated spec, and the
    installer's defaults."""

    name: str
    namespace: str
    uid: str
    spec: PoolSpec
    defaults: PodDefaults = field(default_factory=PodDefaults)

    def owner_reference(self) -> dict[str, Any]:
        return {
            "apiVersion": "fireflow.persistent.ai/v1alpha1",
            "kind": "FireflowWorkerPool",
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }

    def metadata(self, name: str, component: str) -> dict[str, Any]:
        return {
            "name": name,
            "namespace": self.namespace,
            "labels": names.common_labels(self.name, component),
            "ownerReferences": [self.owner_reference()],
        }


def _database_url_env(spec: PoolSpec) -> dict[str, Any]:
    ref = spec.database.secret_ref
    return {"name": worker_variables.DATABASE_URL, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}}


# Kubernetes expands the $(...) references from the two variables above.
_POD_EXECUTOR_ID = executor_ids.executor_id(f"$({worker_variables.POD_NAMESPACE})", f"$({worker_variables.POD_NAME})")


def worker_env(pool: Pool, application_version: str) -> list[dict[str, Any]]:
    """The worker container's environment: the TS worker's variables from the spec, the id from the pod's name."""
    spec, dbos = pool.spec, pool.spec.dbos
    plain = {
        worker_variables.RUN_MIGRATIONS: "false",  # the operator's migration Job migrates; workers only verify
        worker_variables.APPLICATION_NAME: dbos.application_name,
        worker_variables.APPLICATION_VERSION: application_version,
        worker_variables.WORKER_CONCURRENCY: str(dbos.worker_concurrency),
        worker_variables.QUEUE_CONCURRENCY: str(dbos.queue_concurrency),
        worker_variables.POLLING_INTERVAL_MS: str(dbos.polling_interval_ms),
        worker_variables.POOL_SIZE: str(dbos.system_database_pool_size),
        worker_variables.DRAIN_TIMEOUT_MS: str(dbos.shutdown_drain_timeout_ms),
        worker_variables.LOG_LEVEL: dbos.log_level.value,
        worker_variables.PROVISION_CACHE_TTL_MS: str(dbos.provision_cache_ttl_ms),
        worker_variables.SANDBOX_CONCURRENCY: str(dbos.sandbox_queue_concurrency),
        worker_variables.TERMINAL_CONCURRENCY: str(dbos.terminal_queue_concurrency),
        worker_variables.QUEUES: ",".join(spec.queues),
        worker_variables.HEALTH_PORT: str(names.HEALTH_PORT),
        # The operator decides which version is DBOS's latest (versioned rollouts keep older ones serving).
        worker_variables.VERSION_ROLE: worker_variables.VERSION_ROLE_MANAGED,
        # Decided here, not by each pod: the connection budget counts processes x (pool size + 1) per pod.
        worker_variables.PROCESSES: str(worker_processes(spec)),
        worker_variables.POOL: pool.name,  # what the worker's log lines are about, with POD_NAMESPACE
    }
    if spec.bind_address != BindAddress.IPV4:  # the worker's own default: pods of older pools stay as they were
        plain[worker_variables.HEALTH_HOST] = spec.bind_address.value
    return [
        {"name": worker_variables.POD_NAME, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": worker_variables.POD_NAMESPACE, "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        # <namespace>.<pod>: unique across every pool on the database, stable across the pod's restarts.
        {
            "name": worker_variables.WORKER_ID,
            "value": executor_ids.executor_id(
                f"$({worker_variables.POD_NAMESPACE})", f"$({worker_variables.POD_NAME})"
            ),
        },
        _database_url_env(spec),
        *({"name": key, "value": value} for key, value in plain.items()),
        *(_k8s(e) for e in spec.env or []),
    ]


def _pod_spec_common(pool: Pool) -> dict[str, Any]:
    spec = pool.spec
    pod: dict[str, Any] = {
        "securityContext": {**DEFAULT_POD_SECURITY, **_k8s(spec.pod_security_context)},
        # Workers never call the Kubernetes API: no token in the pod, no service links in the env.
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "volumes": [{"name": "tmp", "emptyDir": {}}],
    }
    optional = {
        "serviceAccountName": spec.service_account_name,
        "priorityClassName": spec.priority_class_name,
        "nodeSelector": spec.node_selector,
        "tolerations": [_k8s(t) for t in spec.tolerations or []],
        "affinity": spec.affinity,
        "imagePullSecrets": [_k8s(r) for r in spec.image_pull_secrets or []],
    }
    pod.update({key: value for key, value in optional.items() if value})
    return pod


def container_security(spec: PoolSpec) -> dict[str, Any]:
    """The defaults, with the pool's fields over them; whatever the pool says of capabilities, every one is
    dropped and at most NET_BIND_SERVICE (all the model accepts) added back, as the restricted profile wants."""
    given = _k8s(spec.security_context)
    added = given.pop("capabilities", {}).get("add")
    capabilities: dict[str, Any] = {"drop": ["ALL"], **({"add": added} if added else {})}
    return {**DEFAULT_CONTAINER_SECURITY, **given, "capabilities": capabilities}


def _container_common(pool: Pool, image: str, resources: dict[str, Any]) -> dict[str, Any]:
    return {
        "image": image,
        "imagePullPolicy": pool.spec.image_pull_policy.value,
        "securityContext": container_security(pool.spec),
        "volumeMounts": [{"name": "tmp", "mountPath": WRITABLE_TMP}],
        **({"resources": resources} if resources else {}),
    }


def worker_resources(pool: Pool) -> dict[str, Any]:
    """The pool's own resources (as a whole), else the installer's default (the CRD defaults an absent
    section to `{}`: that is unset too)."""
    return _k8s(pool.spec.resources) or dict(pool.defaults.worker_resources)


def migration_resources(pool: Pool) -> dict[str, Any]:
    return _k8s(pool.spec.migration.resources) or dict(pool.defaults.migration_resources)


def build_statefulset(
    pool: Pool, *, image: str, application_version: str, replicas: int | None, version_index: int = 0
) -> dict[str, Any]:
    """The workers at a rollout target (image, application version), which lags the spec's until the
    migration gate lets it through. `replicas=None` leaves the count to whoever else owns it (an autoscaler)."""
    spec = pool.spec
    probe = {"httpGet": {"path": "/readyz", "port": names.HEALTH_PORT_NAME}, "periodSeconds": 5}
    container = {
        "name": names.CONTAINER_NAME,
        **_container_common(pool, image, worker_resources(pool)),
        "command": ["fireflow-worker"],
        "args": ["run"],
        "env": worker_env(pool, application_version),
        "ports": [{"name": names.HEALTH_PORT_NAME, "containerPort": names.HEALTH_PORT}],
        # A worker that cannot start says why on stderr (one line): the pod's status shows it.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "readinessProbe": probe,
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": names.HEALTH_PORT_NAME},
            "periodSeconds": 10,
            "failureThreshold": 3,
        },
        "startupProbe": {
            "httpGet": {"path": "/healthz", "port": names.HEALTH_PORT_NAME},
            "periodSeconds": 2,
            "failureThreshold": 60,
        },
    }
    pod_spec = {
        **_pod_spec_common(pool),
        "terminationGracePeriodSeconds": spec.termination_grace_period_seconds,
        "containers": [container],
        **({"topologySpreadConstraints": spec.topology_spread_constraints} if spec.topology_spread_constraints else {}),
    }
    selector = names.version_selector_labels(pool.name, version_index)
    template_labels = {**(spec.pod_labels or {}), **names.common_labels(pool.name, names.WORKER_COMPONENT), **selector}
    statefulset: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": pool.metadata(names.statefulset_name(pool.name, version_index), names.WORKER_COMPONENT),
        "spec": {
            "serviceName": names.headless_service_name(pool.name),
            # Workers share nothing but the database: start and stop them together.
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "RollingUpdate"},
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": template_labels, "annotations": dict(spec.pod_annotations or {})},
                "spec": pod_spec,
            },
        },
    }
    if replicas is not None:
        statefulset["spec"]["replicas"] = replicas
    return statefulset


def build_headless_service(pool: Pool) -> dict[str, Any]:
    """Stable DNS for the StatefulSet's pods and a scrape target for their metrics."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": pool.metadata(names.headless_service_name(pool.name), names.WORKER_COMPONENT),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": False,
            "selector": names.selector_labels(pool.name),
            "ports": [
                {"name": names.HEALTH_PORT_NAME, "port": names.HEALTH_PORT, "targetPort": names.HEALTH_PORT_NAME}
            ],
        },
    }


def build_pdb(pool: Pool) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": pool.metadata(names.pdb_name(pool.name), names.WORKER_COMPONENT),
        "spec": {
            "maxUnavailable": pool.spec.pod_disruption_budget.max_unavailable,
            "selector": {"matchLabels": names.selector_labels(pool.name)},  # every version's workers
        },
    }


def network_policy_name(pool_name: str) -> str:
    return pool_name  # its own kind: no other child of the pool is a NetworkPolicy


def build_network_policy(pool: Pool) -> dict[str, Any]:
    """The pool's pods (workers and migration Jobs: every one carries the pool label) are reached only on the
    health and metrics port from `metricsFrom`, and reach only DNS, the database and `extraEgress`."""
    spec = pool.spec.network_policy
    ingress = [{"from": spec.metrics_from, "ports": [{"port": names.HEALTH_PORT, "protocol": "TCP"}]}]
    database: dict[str, Any] = {"ports": [{"port": port, "protocol": "TCP"} for port in spec.database_ports]}
    if spec.database_to:
        database["to"] = spec.database_to
    dns = {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": pool.metadata(network_policy_name(pool.name), names.WORKER_COMPONENT),
        "spec": {
            "podSelector": {"matchLabels": {names.LABEL_POOL: pool.name}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": ingress if spec.metrics_from else [],
            "egress": [dns, database, *(spec.extra_egress or [])],
        },
    }


def wants_pdb(pool: Pool, replicas: int) -> bool:
    """A PDB over a single replica would block every node drain; only pools of 2+ get one."""
    return pool.spec.pod_disruption_budget.enabled and replicas >= 2


def build_migration_job(
    pool: Pool, *, mode: str, image: str, target: str, round_: int, database_label: str, online: bool = False
) -> dict[str, Any]:
    """A Job that plans (`mode="plan"`) or applies (`"apply"`) the DBOS schema migration with `image`.

    `database_label` names the database (names.database_label), so that one apply runs at a time on it."""
    migration = pool.spec.migration
    if mode == "plan":
        args = ["migrate", "--plan", "--exit-zero"]
    elif mode == "apply":
        args = ["migrate", "--lock-timeout-ms", str(migration.lock_timeout_ms), "--retries", str(migration.retries)]
    else:
        raise ValueError(f"unknown migration mode {mode!r}")
    name = names.migration_job_name(pool.name, mode, target, round_)
    metadata = pool.metadata(name, f"migration-{mode}")
    metadata["labels"][names.LABEL_MIGRATION_TARGET] = target
    metadata["labels"][names.LABEL_DATABASE] = database_label
    if online:
        metadata["labels"][names.LABEL_ONLINE] = "true"
    metadata["annotations"] = {names.ANNOTATION_TARGET: f"{image} {pool.spec.dbos.application_version}"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            # The apply retries lock timeouts itself; a failed Job is reported, then retried by the operator
            # as a new attempt after the pool was restored, never blindly by the Job controller.
            "backoffLimit": 0 if mode == "apply" else 2,
            "activeDeadlineSeconds": migration.deadline_seconds,
            "template": {
                "metadata": {
                    "labels": {
                        **names.common_labels(pool.name, f"migration-{mode}"),
                        names.LABEL_MIGRATION_TARGET: target,
                    }
                },
                "spec": {
                    **_pod_spec_common(pool),
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "migrate",
                            **_container_common(pool, image, migration_resources(pool)),
                            "command": ["fireflow-worker"],
                            "args": args,
                            "env": [
                                _database_url_env(pool.spec),
                                {"name": worker_variables.APPLICATION_NAME, "value": pool.spec.dbos.application_name},
                                # libpq names the Job's sessions, so the budget does not count them twice.
                                {"name": worker_variables.CONNECTION_NAME, "value": names.MIGRATION_APPLICATION_NAME},
                            ],
                            "terminationMessagePolicy": "FallbackToLogsOnError",
                        }
                    ],
                },
            },
        },
    }
