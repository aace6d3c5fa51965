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
from fireflow_operator.settings import OperatorSettings

log = logging.getLogger("fireflow.operator")


@dataclass
class Outcome:
    """What a reconcile did, for the handler to report: events to post, and when to look again."""

    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type Normal|Warning, reason, message)
    phase: str = conditions.PENDING
    requeue_seconds: float | None = None


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


class Reconciler:
    def __init__(self, kube: Kube, settings: OperatorSettings) -> None:
        self.kube = kube
        self.settings = settings

    def reconcile(self, body: dict[str, Any]) -> Outcome:
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        generation = int(meta.get("generation", 0))
        old_status: dict[str, Any] = dict(body.get("status") or {})
        old_status.pop("kopf", None)
        status = json.loads(json.dumps(old_status))
        status["observedGeneration"] = generation
        status["selector"] = ",".join(f"{k}={v}" for k, v in names.selector_labels(name).items())
        outcome = Outcome()
        conds: list[dict[str, Any]] = list(status.get("conditions") or [])
        url: str | None = None

        def cond(kind: str, ok: bool | None, reason: str, message: str) -> None:
            nonlocal conds
            conds = conditions.set_condition(conds, kind, ok, reason, redact(message, url), generation)

        try:
            spec = parse_spec(body.get("spec") or {})
        except ValidationError as err:
            cond(conditions.DEGRADED_CONDITION, True, conditions.REASON_INVALID_SPEC, _first_error(err))
            cond(conditions.READY, False, conditions.REASON_INVALID_SPEC, "the spec is invalid; nothing was changed")
            return self._finish(
                namespace, name, old_status, status, conds, conditions.DEGRADED, conditions.REASON_INVALID_SPEC, outcome
            )
        pool = Pool(name=name, namespace=namespace, uid=meta["uid"], spec=spec)
        status["targetImage"] = spec.image

        ref = spec.database.secret_ref
        url = self.kube.secret_value(namespace, ref.name, ref.key)
        if url is None:
            cond(
                conditions.DEGRADED_CONDITION,
                True,
                conditions.REASON_SECRET_MISSING,
                f"Secret {ref.name!r} with key {ref.key!r} not found in namespace {namespace}",
            )
            return self._finish(
                namespace,
                name,
                old_status,
                status,
                conds,
                conditions.DEGRADED,
                conditions.REASON_SECRET_MISSING,
                outcome,
            )

        try:
            facts = budget.probe_database(
                url, spec.dbos.application_name, timeout_seconds=self.settings.database_timeout_seconds
            )
        except psycopg.Error as err:
            message = f"cannot reach the database: {' '.join(str(err).split())}"
            cond(conditions.CONNECTION_BUDGET, None, conditions.REASON_DATABASE_UNREACHABLE, message)
            cond(conditions.DEGRADED_CONDITION, True, conditions.REASON_DATABASE_UNREACHABLE, message)
            outcome.requeue_seconds = self.settings.resync_seconds
            return self._finish(
                namespace,
                name,
                old_status,
                status,
                conds,
                conditions.DEGRADED,
                conditions.REASON_DATABASE_UNREACHABLE,
                outcome,
            )
        status["schemaVersion"] = facts.schema_version

        if facts.foreign_applications:
            message = (
                f"the database's fireflow queues belong to application(s) {', '.join(facts.foreign_applications)}, "
                f"not {spec.dbos.application_name!r}; every pool on one database must use the same "
                f"spec.dbos.applicationName. Nothing was rolled out."
            )
            cond(conditions.DEGRADED_CONDITION, True, conditions.REASON_APPLICATION_CONFLICT, message)
            cond(conditions.READY, False, conditions.REASON_APPLICATION_CONFLICT, message)
            return self._finish(
                namespace,
                name,
                old_status,
                status,
                conds,
                conditions.DEGRADED,
                conditions.REASON_APPLICATION_CONFLICT,
                outcome,
            )

        return self._reconcile_children(pool, url, facts, old_status, status, conds, outcome)

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

    def _reconcile_children(
        self,
        pool: Pool,
        url: str,
        facts: budget.DatabaseFacts,
        old_status: dict[str, Any],
        status: dict[str, Any],
        conds: list[dict[str, Any]],
        outcome: Outcome,
    ) -> Outcome:
        spec, namespace, name = pool.spec, pool.namespace, pool.name
        generation = int(status["observedGeneration"])

        def cond(kind: str, ok: bool | None, reason: str, message: str) -> None:
            nonlocal conds
            conds = conditions.set_condition(conds, kind, ok, reason, redact(message, url), generation)

        self.kube.create(self.kube.core.create_namespaced_service, namespace, build_headless_service(pool))
        sts = read_or_none(self.kube.apps.read_namespaced_stateful_set, names.statefulset_name(name), namespace)
        live_pods = self.kube.list_pod_names(namespace, names.selector_labels(name))

        # The migration gate.
        target = names.target_hash(spec.image, spec.dbos.application_version)
        mig_status = dict(status.get("migration") or {})
        attempt = int(mig_status.get("attempt", 1)) if mig_status.get("target") == target else 1
        step = migration.next_step(
            migration.MigrationInput(
                target=target,
                current_target=status.get("currentTarget") if sts is not None else None,
                migration=mig_status,
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
            outcome.events.append(("Warning" if step.failure else "Normal", reason, redact(message, url)))

        # Replicas: desired by the spec (or its autoscaler), clamped by the budget, zero while gated.
        database = budget.database_identity(url)
        pool_budget = budget.compute_budget(
            facts,
            pool_size=spec.dbos.system_database_pool_size,
            headroom=spec.database.reserved_connections,
            other_pools=self._other_pools_need(pool, database),
        )
        current = sts.spec.replicas if sts is not None else None
        autoscaled = spec.replicas is None
        before = mig_status.get("replicasBefore")  # an autoscaled count saved while the gate held it at zero
        if autoscaled:
            desired = int(before if before is not None else (current if current is not None else 1))
        else:
            desired = int(spec.replicas or 0)
        allowed = min(desired, pool_budget.max_replicas)
        replicas_to_write: int | None = allowed
        if step.hold_at_zero:
            replicas_to_write = 0
            step.migration.setdefault("replicasBefore", desired)
        else:
            step.migration.pop("replicasBefore", None)
            if autoscaled and current is not None and before is None and current <= allowed:
                replicas_to_write = None  # the autoscaler owns the count and it fits: never written
        status["migration"] = step.migration
        status["desiredReplicas"] = 0 if step.hold_at_zero else allowed
        status["connectionBudget"] = pool_budget.as_status(database, desired, allowed)
        if allowed < desired:
            message = pool_budget.explain(desired)
            if (conditions.condition(conds, conditions.CONNECTION_BUDGET) or {}).get("status") != "False":
                outcome.events.append(("Warning", conditions.REASON_OVER_BUDGET, message))
            cond(conditions.CONNECTION_BUDGET, False, conditions.REASON_OVER_BUDGET, message)
        else:
            cond(
                conditions.CONNECTION_BUDGET,
                True,
                conditions.REASON_WITHIN_BUDGET,
                f"{allowed} replicas need {pool_budget.needs(allowed)} of {pool_budget.max_connections} connections",
            )

        # The StatefulSet runs the rolled-out target; a new target only once the gate lets it through.
        if step.roll_out:
            status["currentTarget"] = target
            status["currentImage"] = spec.image
            status["currentApplicationVersion"] = spec.dbos.application_version
        if step.schema_version is not None:
            status["schemaVersion"] = step.schema_version
        if "currentTarget" in status and (sts is not None or step.roll_out):
            desired_sts = build_statefulset(
                pool,
                image=status["currentImage"],
                application_version=status["currentApplicationVersion"],
                replicas=replicas_to_write,
            )
            try:
                self.kube.upsert_statefulset(desired_sts, sts)
            except ApiException as err:
                if err.status != 409:
                    raise
                outcome.requeue_seconds = 1.0  # someone else wrote it meanwhile: look again soon
        pdb = read_or_none(self.kube.policy.read_namespaced_pod_disruption_budget, names.pdb_name(name), namespace)
        if wants_pdb(pool, allowed) and pdb is None:
            self.kube.create(self.kube.policy.create_namespaced_pod_disruption_budget, namespace, build_pdb(pool))
        elif not wants_pdb(pool, allowed) and pdb is not None:
            self.kube.policy.delete_namespaced_pod_disruption_budget(names.pdb_name(name), namespace)

        # No stranded runs: only in steady state (a gated pool's pods come back under their own ids).
        if step.migration.get("phase") == migration.DONE and not step.hold_at_zero and sts is not None:
            stranded = recovery.stranded_executors(
                recovery.pending_executors(
                    url, namespace, names.statefulset_name(name), timeout_seconds=self.settings.database_timeout_seconds
                ),
                namespace=namespace,
                statefulset=names.statefulset_name(name),
                replicas=allowed,
                live_pods=live_pods,
            )
            recovered = recovery.resume_runs_of(
                url, spec.dbos.application_name, stranded, timeout_seconds=self.settings.database_timeout_seconds
            )
            if recovered:
                status["recoveredRuns"] = int(status.get("recoveredRuns", 0)) + recovered
                outcome.events.append(
                    (
                        "Normal",
                        "RunsRecovered",
                        f"handed {recovered} PENDING run(s) of departed {', '.join(stranded)} back to the queue",
                    )
                )

        # Status.
        sts_now = read_or_none(self.kube.apps.read_namespaced_stateful_set, names.statefulset_name(name), namespace)
        sts_status = sts_now.status if sts_now is not None else None
        ready = int(sts_status.ready_replicas or 0) if sts_status is not None else 0
        status["replicas"] = int(sts_status.replicas or 0) if sts_status is not None else 0
        status["readyReplicas"] = ready
        phase_name = step.migration.get("phase")
        if step.failure:
            reason = conditions.REASON_PLAN_FAILED if "plan" in step.failure else conditions.REASON_MIGRATION_FAILED
            cond(conditions.SCHEMA_READY, False, reason, step.failure)
            cond(conditions.DEGRADED_CONDITION, True, reason, step.failure)
        elif phase_name == migration.DONE:
            cond(
                conditions.SCHEMA_READY,
                True,
                conditions.REASON_SCHEMA_CURRENT,
                f"schema version {status.get('schemaVersion')}",
            )
            cond(conditions.DEGRADED_CONDITION, False, conditions.REASON_HEALTHY, "no problem found")
        else:
            reason = {
                migration.PLANNING: conditions.REASON_PLANNING,
                migration.DRAINING: conditions.REASON_DRAINING,
                migration.APPLYING: conditions.REASON_MIGRATING,
            }[str(phase_name)]
            cond(conditions.SCHEMA_READY, False, reason, str(step.migration.get("message") or reason))
            cond(conditions.DEGRADED_CONDITION, False, conditions.REASON_HEALTHY, "no problem found")
        target_replicas = status["desiredReplicas"]
        rolled = (
            sts_status is not None
            and (sts_status.updated_replicas or 0) >= target_replicas
            and status["replicas"] == target_replicas
        )
        progressing = phase_name != migration.DONE or not rolled or ready != target_replicas
        cond(
            conditions.PROGRESSING,
            progressing,
            conditions.REASON_ROLLING_OUT if progressing else conditions.REASON_STABLE,
            f"{ready}/{target_replicas} ready, migration {phase_name}",
        )
        if phase_name == migration.DONE and ready == target_replicas and not progressing:
            cond(
                conditions.READY,
                True,
                conditions.REASON_ALL_READY if target_replicas else conditions.REASON_SCALED_TO_ZERO,
                f"{ready}/{target_replicas} replicas ready",
            )
            phase, reason = (
                conditions.RUNNING,
                (conditions.REASON_ALL_READY if target_replicas else conditions.REASON_SCALED_TO_ZERO),
            )
        else:
            cond(
                conditions.READY,
                False,
                conditions.REASON_REPLICAS_NOT_READY,
                f"{ready}/{target_replicas} replicas ready",
            )
            phase, reason = (
                (conditions.MIGRATING, str(phase_name))
                if phase_name != migration.DONE
                else (conditions.PENDING, conditions.REASON_REPLICAS_NOT_READY)
            )
        if step.failure:
            phase, reason = conditions.DEGRADED, conditions.REASON_MIGRATION_FAILED
            outcome.requeue_seconds = max(1.0, float(step.migration.get("retryAt", 0)) - time.time())
        elif progressing:
            outcome.requeue_seconds = 2.0
        return self._finish(namespace, name, old_status, status, conds, phase, reason, outcome)

    def _finish(
        self,
        namespace: str,
        name: str,
        old_status: dict[str, Any],
        status: dict[str, Any],
        conds: list[dict[str, Any]],
        phase: str,
        reason: str,
        outcome: Outcome,
    ) -> Outcome:
        for changed in conditions.transitions(list(old_status.get("conditions") or []), conds):
            kind = (
                "Normal"
                if (changed["status"] == "True") != (changed["type"] == conditions.DEGRADED_CONDITION)
                else "Warning"
            )
            outcome.events.append(
                (kind, changed["reason"], f"{changed['type']}={changed['status']}: {changed['message']}")
            )
        status["conditions"] = conds
        status["phase"] = phase
        status["phaseReason"] = reason
        outcome.phase = phase
        self.kube.write_status(namespace, name, old_status, status)
        return outcome


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
