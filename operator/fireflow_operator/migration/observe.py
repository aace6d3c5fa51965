"""What the gate needs to know about a pool's migration Jobs, as the watch keeps them (the API server's
answer where the operator runs without its cache) (I/O)."""

from __future__ import annotations

from typing import Any

from fireflow_contract.migration_summary import MigrationSummary
from fireflow_operator.api import names
from fireflow_operator.kube import Kube
from fireflow_operator.migration import machine
from fireflow_operator.migration.jobs import MigrationJob

APPLY_COMPONENT = "migration-apply"


def job_state(job: Any) -> machine.JobState:
    for cond in (job.status.conditions if job.status is not None else None) or []:
        if cond.status == "True" and cond.type == "Complete":
            return "succeeded"
        if cond.status == "True" and cond.type == "Failed":
            return "failed"
    return "running"


def as_migration_job(job: Any) -> MigrationJob:
    component = (job.metadata.labels or {}).get(names.LABEL_COMPONENT, "")
    created = job.metadata.creation_timestamp
    return MigrationJob(
        name=str(job.metadata.name),
        mode="apply" if component == APPLY_COMPONENT else "plan",
        state=job_state(job),
        created=created.isoformat() if created is not None else "",
        target=(job.metadata.labels or {}).get(names.LABEL_MIGRATION_TARGET, ""),
        online=(job.metadata.labels or {}).get(names.LABEL_ONLINE) == "true",
    )


def pool_jobs(kube: Kube, namespace: str, pool_name: str) -> dict[str, Any]:
    """The pool's migration Jobs by name."""
    return {
        str(job.metadata.name): job
        for job in kube.pool_jobs(namespace, pool_name)
        if (job.metadata.labels or {}).get(names.LABEL_COMPONENT, "").startswith("migration-")
    }


def observation(kube: Kube, namespace: str, job: Any | None) -> machine.JobObservation:
    """A Job's state and, once it finished, the summary line its container left as termination message."""
    if job is None:
        return machine.ABSENT
    state = job_state(job)
    if state == "running":
        return machine.JobObservation(state)
    message = ""
    for pod in kube.job_pods(namespace, str(job.metadata.name)):
        for status in pod.status.container_statuses or []:
            terminated = status.state.terminated if status.state else None
            if terminated is not None and terminated.message:
                message = terminated.message.strip()
    summary = MigrationSummary.from_message(message)
    if not message:
        failed = next((c for c in job.status.conditions or [] if c.type == "Failed"), None)
        message = f"{failed.reason}: {failed.message}" if failed is not None else ""
    return machine.JobObservation(state, summary, message[-1000:])


def database_apply_running(
    kube: Kube, namespaces: list[str], database_label: str, namespace: str, pool: str
) -> str | None:
    """Another pool's apply Job on the same database that still runs, named for a message."""
    for job in kube.list_jobs(
        namespaces, {names.LABEL_DATABASE: database_label, names.LABEL_COMPONENT: APPLY_COMPONENT}
    ):
        meta = job.metadata
        if (meta.namespace, (meta.labels or {}).get(names.LABEL_POOL)) == (namespace, pool):
            continue
        if job_state(job) == "running":
            return f"the migration Job {meta.namespace}/{meta.name} of another pool on this database"
    return None
