"""What the plugin shows, built from objects as the API server spells them and from the database's counts (pure).

`summarize_pool` is everything `status` shows, as data (what `-o json|yaml` prints); the executor ids come from
the pods' names and their worker processes exactly as the operator derives them (fireflow_contract.executor_ids).
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from fireflow_contract import executor_ids, worker_variables
from fireflow_operator.api import names
from fireflow_operator.api.model import parse_spec, worker_processes

EVENTS_SHOWN = 10
PLUGIN_MANAGER = "kubectl-fireflow"  # app.kubernetes.io/managed-by of what the plugin creates
PLAN_JOB_TTL_SECONDS = 3600  # a plan Job the plugin could not delete (interrupted) goes by itself
Obj = dict[str, Any]


@dataclass(frozen=True)
class RunCounts:
    """What the pool's database says of its runs (rundb.run_counts)."""

    # (executor id, the run's application version) -> PENDING runs, for every executor id of the pool's pods
    pending: dict[tuple[str, str | None], int] = field(default_factory=dict)
    # the run's application version -> ENQUEUED runs on the pool's queues; None: a run of no version, which
    # DBOS's latest version (the pool's current one: the operator makes it so) takes
    enqueued: dict[str | None, int] = field(default_factory=dict)
    schema_version: int | None = None  # None: the database was never migrated


@dataclass(frozen=True)
class RunsRead:
    """The database's answer for `status`, or why there is none (`error`, one sentence naming the fix)."""

    source: str  # where the database URL came from, for the reader
    counts: RunCounts | None = None
    error: str | None = None


def _parse_time(value: Any) -> datetime.datetime | None:
    if isinstance(value, datetime.datetime):
        return value
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def age(value: Any, now: datetime.datetime) -> str:
    """kubectl's short age of a timestamp: 45s, 12m, 5h, 3d (or <unknown>)."""
    when = _parse_time(value)
    if when is None:
        return "<unknown>"
    seconds = max(0, int((now - when).total_seconds()))
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= 2 * size or (unit == "m" and seconds >= size):
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _condition(status: Obj, kind: str) -> Obj:
    return next((c for c in status.get("conditions") or [] if c.get("type") == kind), {})


def _version_index(pod: Obj) -> int:
    label = ((pod.get("metadata") or {}).get("labels") or {}).get(names.LABEL_VERSION_INDEX)
    return int(label) if label and label.isdigit() else 0


def _pod_ready(pod: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in (pod.get("status") or {}).get("conditions", [])
    )


def _spec_processes(spec: Obj) -> int:
    try:
        return worker_processes(parse_spec(spec))
    except ValidationError:
        return 1  # an invalid spec runs no worker; its pods (if any) predate it


def _pod_processes(pod: Obj, default: int) -> int:
    """The worker processes the pod runs: its own FIREFLOW_WORKER_PROCESSES (a pod made before the spec changed
    keeps its count), else what the spec says now."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        for env in container.get("env") or []:
            if env.get("name") == worker_variables.PROCESSES and str(env.get("value", "")).isdigit():
                return int(env["value"])
    return default


def worker_facts(pool: Obj, pods: Sequence[Obj]) -> list[Obj]:
    """One entry per worker pod: its version, readiness, restarts and the DBOS executor ids it runs as."""
    namespace = pool["metadata"]["namespace"]
    status = pool.get("status") or {}
    by_index = {int(v.get("index", 0)): str(v.get("applicationVersion")) for v in status.get("versions") or []}
    current = str(status.get("currentApplicationVersion") or "")
    processes = _spec_processes(pool.get("spec") or {})
    workers = []
    for pod in sorted(pods, key=lambda p: str(p["metadata"]["name"])):
        name = str(pod["metadata"]["name"])
        base = executor_ids.executor_id(namespace, name)
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        workers.append(
            {
                "pod": name,
                "applicationVersion": by_index.get(_version_index(pod), current),
                "ready": _pod_ready(pod),
                "phase": (pod.get("status") or {}).get("phase", ""),
                "restarts": sum(int(s.get("restartCount") or 0) for s in statuses),
                "created": pod["metadata"].get("creationTimestamp"),
                "executors": [executor_ids.child_executor_id(base, k) for k in range(_pod_processes(pod, processes))],
            }
        )
    return workers


def executor_facts(workers: Sequence[Obj], counts: RunCounts | None) -> list[Obj]:
    """One entry per executor id: every process of every worker pod, then every id that still holds PENDING runs
    but whose process is gone (its runs wait for `kubectl fireflow recover`). `pending` is None when the
    database could not be read."""
    pending: dict[str, int] = {}
    for (executor, _), count in (counts.pending if counts else {}).items():
        pending[executor] = pending.get(executor, 0) + count
    facts = []
    for worker in workers:
        for executor in worker["executors"]:
            facts.append(
                {
                    "executor": executor,
                    "pod": worker["pod"],
                    "applicationVersion": worker["applicationVersion"],
                    "alive": True,
                    "ready": worker["ready"],
                    "pending": pending.pop(executor, 0) if counts else None,
                }
            )
    for executor in sorted(pending):
        facts.append(
            {"executor": executor, "pod": None, "applicationVersion": None, "alive": False, "ready": False,
             "pending": pending[executor]}
        )  # fmt: skip
    return facts


def version_facts(status: Obj, counts: RunCounts | None) -> list[Obj]:
    """The status's versions, each with its runs: PENDING ones held by the pool's executors and ENQUEUED ones on
    its queues, by the runs' application version; runs of no version count for the current version. Without the
    database, a retiring version's runsLeft (the operator's last count) stands in."""
    current = status.get("currentApplicationVersion")
    facts = []
    for version in status.get("versions") or []:
        name = version.get("applicationVersion")
        if counts is not None:
            pending = sum(n for (_, v), n in counts.pending.items() if v == name or (v is None and name == current))
            enqueued = counts.enqueued.get(name, 0) + (counts.enqueued.get(None, 0) if name == current else 0)
            runs: Obj | None = {"pending": pending, "enqueued": enqueued}
        else:
            left = version.get("runsLeft")
            runs = {"pending": left.get("pending", 0), "enqueued": left.get("enqueued", 0)} if left else None
        facts.append({**version, "runs": runs})
    return facts


def event_facts(events: Sequence[Obj]) -> list[Obj]:
    """The pool's latest events, oldest first (as `kubectl describe` lists them)."""

    def last_seen(event: Obj) -> str:
        return str(
            event.get("lastTimestamp") or event.get("eventTime") or event["metadata"].get("creationTimestamp") or ""
        )

    ordered = sorted(
        events, key=lambda e: _parse_time(last_seen(e)) or datetime.datetime.min.replace(tzinfo=datetime.UTC)
    )
    return [
        {
            "type": e.get("type", ""),
            "reason": e.get("reason", ""),
            "message": " ".join(str(e.get("message") or "").split()),
            "count": int(e.get("count") or 1),
            "lastSeen": last_seen(e),
        }
        for e in ordered[-EVENTS_SHOWN:]
    ]


def _runs_fact(read: RunsRead | None) -> Obj | None:
    if read is None:
        return None
    counts = read.counts
    return {
        "source": read.source,
        "error": read.error,
        "pending": sum(counts.pending.values()) if counts else None,
        "enqueued": sum(counts.enqueued.values()) if counts else None,
        "schemaVersion": counts.schema_version if counts else None,
    }


def summarize_pool(
    pool: Obj,
    pods: Sequence[Obj],
    events: Sequence[Obj],
    *,
    runs: RunsRead | None = None,
    last_job: Obj | None = None,
) -> Obj:
    """Everything `status` shows, as data (what `-o json|yaml` prints). `runs`: the database's counts (None: not
    asked for); `last_job`: the pool's newest migration Job (`job_fact`)."""
    spec, status = pool.get("spec") or {}, pool.get("status") or {}
    budget = status.get("connectionBudget") or None
    counts = runs.counts if runs else None
    workers = worker_facts(pool, pods)
    return {
        "namespace": pool["metadata"]["namespace"],
        "name": pool["metadata"]["name"],
        "phase": status.get("phase", "Unknown"),
        "phaseReason": status.get("phaseReason", ""),
        "message": _condition(status, "Ready").get("message", ""),
        "image": status.get("currentImage"),
        "targetImage": status.get("targetImage") or spec.get("image"),
        "applicationVersion": status.get("currentApplicationVersion"),
        "replicas": {
            "asked": spec.get("replicas"),
            "desired": status.get("desiredReplicas"),
            "allowed": (budget or {}).get("allowedReplicas"),
            "current": status.get("replicas"),
            "ready": status.get("readyReplicas"),
        },
        "schemaVersion": status.get("schemaVersion"),
        "requiredSchemaVersion": status.get("requiredSchemaVersion"),
        "recoveredRuns": int(status.get("recoveredRuns") or 0),
        "deleting": bool(pool["metadata"].get("deletionTimestamp")),
        "conditions": [
            {k: c.get(k) for k in ("type", "status", "reason", "message", "lastTransitionTime")}
            for c in status.get("conditions") or []
        ],
        "versions": version_facts(status, counts),
        "workers": workers,
        "executors": executor_facts(workers, counts),
        "runs": _runs_fact(runs),
        "migration": status.get("migration") or None,
        "lastMigrationJob": last_job,
        "connectionBudget": budget,
        "events": event_facts(events),
    }


def _ready_of_desired(spec: Obj, status: Obj) -> str:
    asked = spec.get("replicas")
    desired = asked if asked is not None else status.get("desiredReplicas")
    return f"{status.get('readyReplicas', 0)}/{'-' if desired is None else desired}"


def pool_row(pool: Obj) -> Obj:
    """One pool as `list` shows it: READY is ready workers of those asked for (spec.replicas)."""
    spec, status = pool.get("spec") or {}, pool.get("status") or {}
    return {
        "namespace": pool["metadata"]["namespace"],
        "name": pool["metadata"]["name"],
        "phase": status.get("phase", "Unknown"),
        "reason": status.get("phaseReason", ""),
        "ready": _ready_of_desired(spec, status),
        "applicationVersion": status.get("currentApplicationVersion"),
        "image": status.get("currentImage") or spec.get("image"),
        "schemaVersion": status.get("schemaVersion"),
        "created": pool["metadata"].get("creationTimestamp"),
    }


# ---- executor ids ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExecutorId:
    """An executor id taken apart: `<namespace>.<statefulset>-<ordinal>[-p<process>]`."""

    executor: str
    namespace: str
    pool: str
    statefulset: str
    pod: str
    ordinal: int


def parse_executor(executor: str, pool_names: Sequence[str]) -> list[ExecutorId]:
    """The ways `executor` can be a process of one of the namespace's pools (`pool_names`): one normally, none
    for another program's id, two when pools `a` and `a-v2` both exist (`a-v2-0` is either's)."""
    namespace, dot, _ = executor.partition(".")
    if not dot:
        return []
    found = []
    for pool in pool_names:
        match = executor_ids.pool_executor_pattern(namespace, pool).fullmatch(executor)
        if match is not None:
            sts, ordinal = match.group(1), int(match.group(2))
            found.append(ExecutorId(executor, namespace, pool, sts, f"{sts}-{ordinal}", ordinal))
    return found


# ---- the one-off plan Job ---------------------------------------------------------------------------------------


def one_off_plan_job(job: Obj, pool_name: str) -> Obj:
    """The operator's plan Job (builders.build_migration_job) as the plugin runs it once: a generated name, and
    managed by the plugin, so the operator neither adopts nor deletes it (its gate watches only its own Jobs);
    owned by the pool without blocking its deletion (which would need the right to update the pool's
    finalizers); gone an hour after it finished, should the plugin not delete it. It keeps the pool label, so
    the pool's NetworkPolicy lets it reach the database."""
    metadata = {key: value for key, value in job["metadata"].items() if key != "name"}
    metadata["generateName"] = pool_name[:50].rstrip("-.") + "-plan-"
    labels = {k: v for k, v in metadata["labels"].items() if k != names.LABEL_DATABASE}  # for apply Jobs only
    metadata["labels"] = {**labels, names.LABEL_MANAGED_BY: PLUGIN_MANAGER}
    metadata["ownerReferences"] = [
        {**ref, "controller": False, "blockOwnerDeletion": False} for ref in metadata["ownerReferences"]
    ]
    template = job["spec"]["template"]
    template_metadata = {**template["metadata"], "labels": {**template["metadata"]["labels"],
                                                            names.LABEL_MANAGED_BY: PLUGIN_MANAGER}}  # fmt: skip
    spec = {**job["spec"], "ttlSecondsAfterFinished": PLAN_JOB_TTL_SECONDS,
            "template": {**template, "metadata": template_metadata}}  # fmt: skip
    return {**job, "metadata": metadata, "spec": spec}
