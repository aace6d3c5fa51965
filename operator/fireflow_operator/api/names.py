"""Every name, label and annotation key the operator uses, from one place."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_POOL = "fireflow.persistent.ai/pool"
LABEL_MIGRATION_TARGET = "fireflow.persistent.ai/migration-target"
LABEL_VERSION_INDEX = "fireflow.persistent.ai/version-index"  # pods of the second and later versions
LABEL_ONLINE = "fireflow.persistent.ai/online"  # on apply Jobs that run while the pool keeps serving
LABEL_DATABASE = "fireflow.persistent.ai/database"  # on apply Jobs: one at a time per database
ANNOTATION_TARGET = "fireflow.persistent.ai/target"
FINALIZER = "fireflow.persistent.ai/recover-runs"  # on pools and on their connection Secret copies


def canonical_selector(selector: Mapping[str, str]) -> str:
    """A label selector as `key=value,...` in key order: one spelling per selector ("" selects every pool)."""
    return label_selector(dict(sorted(selector.items())))


def pool_finalizer(selector: Mapping[str, str]) -> str:
    """The finalizer an operator puts on its pools: one per shard (FIREFLOW_OPERATOR_POOL_SELECTOR), since kopf
    removes its finalizer from every pool its handlers do not select, and two shards sharing one would fight."""
    if not selector:
        return FINALIZER
    return f"{FINALIZER}-{hashlib.sha256(canonical_selector(selector).encode()).hexdigest()[:10]}"


def is_pool_finalizer(finalizer: str) -> bool:
    return finalizer == FINALIZER or finalizer.startswith(f"{FINALIZER}-")


# On a pool being deleted, once its finalizer handed every run back: a later call of the finalizer (kopf may
# call it again) finds the work done instead of finding the connection copy gone.
ANNOTATION_RUNS_HANDED_BACK = "fireflow.persistent.ai/runs-handed-back"
CONNECTION_KEY = "url"

WORKER_APP = "fireflow-worker"
MIGRATION_APP = "fireflow-migration"  # never matched by the workers' selector (StatefulSet, Service, PDB)
WORKER_COMPONENT = "worker"
MANAGER = "fireflow-operator"
HEALTH_PORT = 8080
HEALTH_PORT_NAME = "http"
CONTAINER_NAME = "worker"
# PostgreSQL application_name of each kind of session, so the connection budget can tell them apart.
OPERATOR_APPLICATION_NAME = "fireflow-operator"
MIGRATION_APPLICATION_NAME = "fireflow-migration"  # PGAPPNAME of the migration Jobs
JOB_NAME_MAX = 63  # Job names become pod label values


def selector_labels(pool_name: str) -> dict[str, str]:
    """The only labels a selector uses: stable for the life of the pool."""
    return {LABEL_NAME: WORKER_APP, LABEL_INSTANCE: pool_name}


def label_selector(labels: Mapping[str, str]) -> str:
    """Labels as a label selector, `key=value,...` in the labels' order."""
    return ",".join(f"{key}={value}" for key, value in labels.items())


def workers_selector(pool_name: str) -> str:
    """The label selector of the pool's workers, every version's."""
    return label_selector(selector_labels(pool_name))


def children_selector(pool_name: str) -> str:
    """The label selector of every object the operator made for the pool (StatefulSets, Jobs, ...)."""
    return label_selector({LABEL_POOL: pool_name, LABEL_MANAGED_BY: MANAGER})


def common_labels(pool_name: str, component: str) -> dict[str, str]:
    app = WORKER_APP if component == WORKER_COMPONENT else MIGRATION_APP
    return {
        LABEL_NAME: app,
        LABEL_INSTANCE: pool_name,
        LABEL_COMPONENT: component,
        LABEL_MANAGED_BY: MANAGER,
        LABEL_POOL: pool_name,
    }


def statefulset_name(pool_name: str, version_index: int = 0) -> str:
    """One StatefulSet per application version: the first keeps the pool's own name (pools from before
    versioned rollouts), later ones are `<pool>-v<N>`, so their pods (executor ids) never collide."""
    return pool_name if version_index == 0 else f"{pool_name}-v{version_index + 1}"


def version_selector_labels(pool_name: str, version_index: int) -> dict[str, str]:
    """The immutable selector of one version's StatefulSet (the first one's predates versions: it has none)."""
    extra = {LABEL_VERSION_INDEX: str(version_index)} if version_index else {}
    return {**selector_labels(pool_name), **extra}


def scale_selector(pool_name: str, version_index: int) -> str:
    """status.selector for /scale: the current version's pods only (autoscalers size the current version)."""
    base = workers_selector(pool_name)
    return f"{base},{LABEL_VERSION_INDEX}={version_index}" if version_index else f"{base},!{LABEL_VERSION_INDEX}"


def headless_service_name(pool_name: str) -> str:
    return f"{pool_name}-workers"


def pdb_name(pool_name: str) -> str:
    return pool_name


def connection_secret_name(pool_name: str) -> str:
    """The operator's copy of the pool's database Secret: it outlives the user's Secret until the pool's
    runs were handed back (deleting both together, or the namespace, must not strand them)."""
    return f"{pool_name}-connection"


def database_label(database_key: str) -> str:
    """A label value naming one database of one server (a hash: label values are short)."""
    return hashlib.sha256(database_key.encode()).hexdigest()[:16]


def target_hash(image: str, application_version: str) -> str:
    """Identifies one (image, application version) rollout target; part of its migration Job names."""
    return hashlib.sha256(f"{image}\n{application_version}".encode()).hexdigest()[:10]


def migration_spec_key(target: str, migration_spec: dict[str, object]) -> str:
    """What an abandoned migration waits to change: the target or spec.migration."""
    text = json.dumps({"target": target, "migration": migration_spec}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def migration_job_name(pool_name: str, mode: str, target: str, round_: int) -> str:
    """Deterministic, so an operator restarted mid-migration finds its Job instead of starting another; the
    round grows with every attempt and target, so a name is never reused for a different question."""
    suffix = f"-{mode}-{target}-{round_}"
    return pool_name[: JOB_NAME_MAX - len(suffix)].rstrip("-.") + suffix
