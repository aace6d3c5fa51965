"""One reconcile of one pool: observe everything fresh, decide with the pure modules, act, write status.

Safe to run any number of times and from any state: creates are idempotent, Job names deterministic, and
nothing is written when nothing changed (an idle, ready pool costs the API server reads only).
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from fireflow_operator import budget, conditions, migration, names, recovery
from fireflow_operator.builders import (
    Pool,
    build_headless_service,
    build_migration_job,
    build_pdb,
    build_statefulset,
    wants_pdb,
)
from fireflow_operator.kube import Kube, read_or_none
from fireflow_operator.model import parse_spec
from fireflow_operator.scaling import ReplicaPlan, plan_replicas
from fireflow_operator.settings import OperatorSettings
from fireflow_operator.summary import summarize

log = logging.getLogger("fireflow.operator")


@dataclass
class Outcome:
    """What a reconcile did, for the handler to report: events to post, and when to look again."""

    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type Normal|Warning, reason, message)
    phase: str = conditions.PENDING
    requeue_seconds: float | None = None
    allowed_replicas: int | None = None  # what the connection budget allows, when it was computed
    recovered_runs: int = 0


def redact(text: str, secret: str | None) -> str:
    """Remove a secret (and any URL password) from text that may reach status, events or logs."""
    if secret:
        text = text.replace(secret, "***")
        password = re.search(r"://[^:/@]*:([^@]*)@", secret)
        if password and password.group(1):
            text = text.replace(password.group(1), "***")
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", text)


def _first_error(err: ValidationError) -> str:
    first = err.errors(include_url=False)[0]
    where = ".".join(str(part) for part in first.get("loc", ()))
    message = str(first["msg"]).removeprefix("Value error, ")
    return f"spec.{where}: {message}" if where else message


def _job_observation(kube: Kube, namespace: str, job_name: str) -> migration.JobObservation:
    job = read_or_none(kube.batch.read_namespaced_job, job_name, namespace)
    if job is None:
        return migration.ABSENT
    state: migration.JobState = "running"
    job_conditions = list(job.status.conditions or []) if job.status is not None else []
    for cond in job_conditions:
        if cond.status == "True" and cond.type == "Complete":
            state = "succeeded"
        elif cond.status == "True" and cond.type == "Failed":
            state = "failed"
    if state == "running":
        return migration.JobObservation(state)
    summary, message = None, ""
    for pod in kube.job_pods(namespace, job_name):
        for status in pod.status.container_statuses or []:
            terminated = status.state.terminated if status.state else None
            if terminated is not None and terminated.message:
                message = terminated.message.strip()
    for line in reversed(message.splitlines()):
        try:
            summary = json.loads(line)
            break
        except json.JSONDecodeError:
            continue
    if not message:
        failed = next((c for c in job_conditions if c.type == "Failed"), None)
        message = f"{failed.reason}: {failed.message}" if failed is not None else ""
    return migration.JobObservation(state, summary, message[-1000:])


@dataclass
class StatusDraft:
    """The status being built in one reconcile; conditions redact the database URL's secret."""

    namespace: str
    name: str
    old: dict[str, Any]
    new: dict[str, Any]
    generation: int
    outcome: Outcome = field(default_factory=Outcome)
    url: str | None = None

    @classmethod
    def start(cls, body: dict[str, Any]) -> StatusDraft:
        meta = body["metadata"]
        old = dict(body.get("status") or {})
        old.pop("kopf", None)
        new = json.loads(json.dumps(old))
        new["observedGeneration"] = int(meta.get("generation", 0))
        new["selector"] = ",".join(f"{k}={v}" for k, v in names.selector_labels(meta["name"]).items())
        return cls(meta["namespace"], meta["name"], old, new, new["observedGeneration"])

    def cond(self, kind: str, ok: bool | None, reason: str, message: str) -> None:
        current = list(self.new.get("conditions") or [])
        self.new["conditions"] = conditions.set_condition(
            current, kind, ok, reason, redact(message, self.url), self.generation
        )

    def event(self, kind: str, reason: str, message: str) -> None:
        self.outcome.events.append((kind, reason, redact(message, self.url)))

    def blocked(self, reason: str, message: str, *, not_ready: bool = False) -> None:
        """The pool cannot proceed: Degraded with `reason`, and nothing else is touched."""
        self.cond(conditions.DEGRADED_CONDITION, True, reason, message)
        if not_ready:
            self.cond(conditions.READY, False, reason, message)
        self.new["phase"], self.new["phaseReason"] = conditions.DEGRADED, reason


class Reconciler:
    def __init__(self, kube: Kube, settings: OperatorSettings) -> None:
        self.kube = kube
        self.settings = settings

    def reconcile(self, body: dict[str, Any]) -> Outcome:
        draft = StatusDraft.start(body)
        self._reconcile(body, draft)
        return self._finish(draft)

    def _reconcile(self, body: dict[str, Any], draft: StatusDraft) -> None:
        try:
            spec = parse_spec(body.get("spec") or {})
        except ValidationError as err:
            draft.cond(
                conditions.READY, False, conditions.REASON_INVALID_SPEC, "the spec is invalid; nothing was changed"
            )
            draft.blocked(conditions.REASON_INVALID_SPEC, _first_error(err))
            return
        pool = Pool(name=draft.name, namespace=draft.namespace, uid=body["metadata"]["uid"], spec=spec)
        draft.new["targetImage"] = spec.image
        ref = spec.database.secret_ref
        draft.url = self.kube.secret_value(pool.namespace, ref.name, ref.key)
        if draft.url is None:
            message = f"Secret {ref.name!r} with key {ref.key!r} not found in namespace {pool.namespace}"
            draft.blocked(conditions.REASON_SECRET_MISSING, message)
            return
        try:
            facts = budget.probe_database(
                draft.url, spec.dbos.application_name, timeout_seconds=self.settings.database_timeout_seconds
            )
        except psycopg.Error as err:
            message = f"cannot reach the database: {' '.join(str(err).split())}"
            draft.cond(conditions.CONNECTION_BUDGET, None, conditions.REASON_DATABASE_UNREACHABLE, message)
            draft.blocked(conditions.REASON_DATABASE_UNREACHABLE, message)
            draft.outcome.requeue_seconds = self.settings.resync_seconds
            return
        draft.new["schemaVersion"] = facts.schema_version
        if facts.foreign_applications:
            message = (
                f"the database's fireflow queues belong to application(s) {', '.join(facts.foreign_applications)}, "
                f"not {spec.dbos.application_name!r}; every pool on one database must use the same "
                f"spec.dbos.applicationName. Nothing was rolled out."
            )
            draft.blocked(conditions.REASON_APPLICATION_CONFLICT, message, not_ready=True)
            return
        self._reconcile_children(pool, draft.url, facts, draft)

    def _other_pools_need(self, pool: Pool, database: str) -> int:
        total = 0
        for other in self.kube.list_pools(self.settings.namespaces):
            meta = other["metadata"]
            if (meta["namespace"], meta["name"]) == (pool.namespace, pool.name):
                continue
            other_budget = (other.get("status") or {}).get("connectionBudget") or {}
            if other_budget.get("database") == database:
                total += int(other_budget.get("needed", 0))
        return total

    def _gate(self, pool: Pool, draft: StatusDraft, sts: Any, live_pods: set[str]) -> migration.MigrationStep:
        """Advance the migration gate one step and create the Job it asks for."""
        spec, namespace, name = pool.spec, pool.namespace, pool.name
        target = names.target_hash(spec.image, spec.dbos.application_version)
        saved = dict(draft.new.get("migration") or {})
        attempt = int(saved.get("attempt", 1)) if saved.get("target") == target else 1
        step = migration.next_step(
            migration.MigrationInput(
                target=target,
                current_target=draft.new.get("currentTarget") if sts is not None else None,
                migration=saved,
                plan_job=_job_observation(
                    self.kube, namespace, names.migration_job_name(name, "plan", target, attempt)
                ),
                apply_job=_job_observation(
                    self.kube, namespace, names.migration_job_name(name, "apply", target, attempt)
                ),
                pods_left=len(live_pods),
                now=time.time(),
                retry_base_seconds=self.settings.migration_retry_seconds,
            )
        )
        if step.create_job is not None:
            job = build_migration_job(
                pool, mode=step.create_job, image=spec.image, target=target, attempt=int(step.migration["attempt"])
            )
            self.kube.create(self.kube.batch.create_namespaced_job, namespace, job)
        for reason, message in step.events:
            draft.event("Warning" if step.failure else "Normal", reason, message)
        if step.roll_out:
            draft.new.update(
                currentTarget=target, currentImage=spec.image, currentApplicationVersion=spec.dbos.application_version
            )
        if step.schema_version is not None:
            draft.new["schemaVersion"] = step.schema_version
        return step

    def _scale(
        self, pool: Pool, facts: budget.DatabaseFacts, draft: StatusDraft, sts: Any, step: migration.MigrationStep
    ) -> ReplicaPlan:
        """Replicas: desired by the spec (or its autoscaler), clamped by the budget, zero while gated."""
        spec = pool.spec
        assert draft.url is not None
        database = budget.database_identity(draft.url)
        pool_budget = budget.compute_budget(
            facts,
            pool_size=spec.dbos.system_database_pool_size,
            headroom=spec.database.reserved_connections,
            other_pools=self._other_pools_need(pool, database),
        )
        saved = (draft.new.get("migration") or {}).get("replicasBefore")
        plan = plan_replicas(
            spec_replicas=spec.replicas,
            current=sts.spec.replicas if sts is not None else None,
            saved=saved,
            max_replicas=pool_budget.max_replicas,
            hold_at_zero=step.hold_at_zero,
        )
        if step.hold_at_zero:
            step.migration.setdefault("replicasBefore", plan.desired)
        else:
            step.migration.pop("replicasBefore", None)
        draft.new["migration"] = step.migration
        draft.new["desiredReplicas"] = 0 if step.hold_at_zero else plan.allowed
        draft.new["connectionBudget"] = pool_budget.as_status(database, plan.desired, plan.allowed)
        draft.outcome.allowed_replicas = plan.allowed
        if plan.allowed < plan.desired:
            message = pool_budget.explain(plan.desired)
            was = conditions.condition(list(draft.new.get("conditions") or []), conditions.CONNECTION_BUDGET) or {}
            if was.get("status") != "False" or was.get("message") != message:
                draft.event("Warning", conditions.REASON_OVER_BUDGET, message)
            draft.cond(conditions.CONNECTION_BUDGET, False, conditions.REASON_OVER_BUDGET, message)
        else:
            needs = f"{pool_budget.needs(plan.allowed)} of {pool_budget.max_connections} connections"
            draft.cond(
                conditions.CONNECTION_BUDGET,
                True,
                conditions.REASON_WITHIN_BUDGET,
                f"{plan.allowed} replicas need {needs}",
            )
        return plan

    def _apply_children(self, pool: Pool, draft: StatusDraft, sts: Any, plan: ReplicaPlan, rolling: bool) -> None:
        """The StatefulSet runs the rolled-out target (a new one only once the gate let it through), and a PDB."""
        namespace, name = pool.namespace, pool.name
        if "currentTarget" in draft.new and (sts is not None or rolling):
            desired = build_statefulset(
                pool,
                image=draft.new["currentImage"],
                application_version=draft.new["currentApplicationVersion"],
                replicas=plan.write,
            )
            try:
                self.kube.upsert_statefulset(desired, sts)
            except ApiException as err:
                if err.status != 409:
                    raise
                draft.outcome.requeue_seconds = 1.0  # someone else wrote it meanwhile: look again soon
        pdb = read_or_none(self.kube.policy.read_namespaced_pod_disruption_budget, names.pdb_name(name), namespace)
        if wants_pdb(pool, plan.allowed) and pdb is None:
            self.kube.create(self.kube.policy.create_namespaced_pod_disruption_budget, namespace, build_pdb(pool))
        elif not wants_pdb(pool, plan.allowed) and pdb is not None:
            self.kube.policy.delete_namespaced_pod_disruption_budget(names.pdb_name(name), namespace)

    def _recover(self, pool: Pool, draft: StatusDraft, replicas: int, live_pods: set[str]) -> None:
        """No stranded runs: hand back the PENDING runs of departed pods that will not return."""
        assert draft.url is not None
        sts_name, timeout = names.statefulset_name(pool.name), self.settings.database_timeout_seconds
        pending = recovery.pending_executors(draft.url, pool.namespace, sts_name, timeout_seconds=timeout)
        stranded = recovery.stranded_executors(
            pending, namespace=pool.namespace, statefulset=sts_name, replicas=replicas, live_pods=live_pods
        )
        recovered = recovery.resume_runs_of(
            draft.url, pool.spec.dbos.application_name, stranded, timeout_seconds=timeout
        )
        draft.outcome.recovered_runs = recovered
        if recovered:
            draft.new["recoveredRuns"] = int(draft.new.get("recoveredRuns", 0)) + recovered
            message = f"handed {recovered} PENDING run(s) of departed {', '.join(stranded)} back to the queue"
            draft.event("Normal", "RunsRecovered", message)

    def _reconcile_children(self, pool: Pool, url: str, facts: budget.DatabaseFacts, draft: StatusDraft) -> None:
        namespace, name = pool.namespace, pool.name
        self.kube.create(self.kube.core.create_namespaced_service, namespace, build_headless_service(pool))
        sts = read_or_none(self.kube.apps.read_namespaced_stateful_set, names.statefulset_name(name), namespace)
        live_pods = self.kube.list_pod_names(namespace, names.selector_labels(name))
        step = self._gate(pool, draft, sts, live_pods)
        plan = self._scale(pool, facts, draft, sts, step)
        self._apply_children(pool, draft, sts, plan, step.roll_out)
        # Only in steady state: the pods of a pool held at zero come back under their own ids.
        if step.migration.get("phase") == migration.DONE and not step.hold_at_zero and sts is not None:
            self._recover(pool, draft, plan.allowed, live_pods)

        sts_now = read_or_none(self.kube.apps.read_namespaced_stateful_set, names.statefulset_name(name), namespace)
        sts_status = sts_now.status if sts_now is not None else None
        draft.new["replicas"] = int(sts_status.replicas or 0) if sts_status is not None else 0
        draft.new["readyReplicas"] = int(sts_status.ready_replicas or 0) if sts_status is not None else 0
        summary = summarize(
            step,
            schema_version=draft.new.get("schemaVersion"),
            target=draft.new["desiredReplicas"],
            replicas=draft.new["replicas"],
            ready=draft.new["readyReplicas"],
            updated=int(sts_status.updated_replicas or 0) if sts_status is not None else 0,
        )
        for kind, ok, reason, message in summary.conditions:
            draft.cond(kind, ok, reason, message)
        draft.new["phase"], draft.new["phaseReason"] = summary.phase, summary.reason
        if step.failure:
            draft.outcome.requeue_seconds = max(1.0, float(step.migration.get("retryAt", 0)) - time.time())
        elif summary.progressing:
            draft.outcome.requeue_seconds = 2.0

    def _finish(self, draft: StatusDraft) -> Outcome:
        old_conditions = list(draft.old.get("conditions") or [])
        for changed in conditions.transitions(old_conditions, list(draft.new.get("conditions") or [])):
            good = changed["type"] == conditions.PROGRESSING or (
                (changed["status"] == "True") != (changed["type"] == conditions.DEGRADED_CONDITION)
            )
            message = f"{changed['type']}={changed['status']}: {changed['message']}"
            draft.outcome.events.append(("Normal" if good else "Warning", changed["reason"], message))
        draft.outcome.phase = str(draft.new.get("phase", conditions.PENDING))
        self.kube.write_status(draft.namespace, draft.name, draft.old, draft.new)
        return draft.outcome


def finalize(kube: Kube, settings: OperatorSettings, body: dict[str, Any]) -> str | None:
    """Before a pool goes: stop its workers, then hand their PENDING runs back to the queue.

    Returns None when done, else what it is still waiting for (the caller retries later).
    """
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    sts_name = names.statefulset_name(name)
    sts = read_or_none(kube.apps.read_namespaced_stateful_set, sts_name, namespace)
    if sts is not None and sts.spec.replicas:
        kube.apps.patch_namespaced_stateful_set_scale(sts_name, namespace, {"spec": {"replicas": 0}})
    if kube.list_pod_names(namespace, names.selector_labels(name)):
        return "waiting for the workers to drain and exit"
    try:
        spec = parse_spec(body.get("spec") or {})
    except ValidationError:
        return None  # an invalid pool never ran workers
    url = kube.secret_value(namespace, spec.database.secret_ref.name, spec.database.secret_ref.key)
    if url is None:
        return None
    try:
        executors = recovery.pending_executors(
            url, namespace, sts_name, timeout_seconds=settings.database_timeout_seconds
        )
        recovery.resume_runs_of(
            url, spec.dbos.application_name, executors, timeout_seconds=settings.database_timeout_seconds
        )
    except psycopg.Error as err:
        return f"cannot reach the database to recover runs: {redact(' '.join(str(err).split()), url)}"
    return None
