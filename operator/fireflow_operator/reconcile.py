"""One reconcile of one pool: observe everything fresh, decide with the pure modules, act, write status.

Safe to run any number of times and from any state: creates are idempotent, Job names deterministic, and
nothing is written when nothing changed (an idle, ready pool costs the API server reads only). Reconciles
of different pools run in parallel threads; the two decisions that span pools (how many connections each
may take, which apply Job may run on a database) are taken under a lock.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any

from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from fireflow_operator import conditions, connection, jobs, migration, names, observe, recovery
from fireflow_operator.budget import (
    Budget,
    DatabaseFacts,
    PoolNeed,
    Usage,
    compute_budget,
    pool_need,
    same_decision,
)
from fireflow_operator.builders import (
    Pool,
    build_headless_service,
    build_migration_job,
    build_pdb,
    build_statefulset,
    wants_pdb,
)
from fireflow_operator.dbprobe import (
    DatabaseQueryError,
    DatabaseUnreachableError,
    pool_connection_prefix,
    probe_database,
)
from fireflow_operator.kube import Kube, read_or_none
from fireflow_operator.model import parse_spec
from fireflow_operator.scaling import ReplicaPlan, plan_replicas
from fireflow_operator.settings import OperatorSettings
from fireflow_operator.status import Outcome, StatusDraft, first_error
from fireflow_operator.summary import summarize
from fireflow_operator.usage import UsageHistory


class Reconciler:
    def __init__(self, kube: Kube, settings: OperatorSettings) -> None:
        self.kube = kube
        self.settings = settings
        self.usage = UsageHistory(settings.budget_window_seconds)
        self._needs: dict[tuple[str, str], PoolNeed] = {}  # what each pool was last allowed, before its status
        self._budget_lock = threading.Lock()
        self._database_locks: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)

    def reconcile(self, body: dict[str, Any]) -> Outcome:
        draft = StatusDraft.start(body)
        self._reconcile(body, draft)
        draft.transition_events()
        self.kube.write_status(draft.namespace, draft.name, draft.old, draft.new)
        return draft.outcome

    def _reconcile(self, body: dict[str, Any], draft: StatusDraft) -> None:
        try:
            spec = parse_spec(body.get("spec") or {})
        except ValidationError as err:
            draft.blocked(conditions.REASON_INVALID_SPEC, f"{first_error(err)}; nothing was changed")
            return
        pool = Pool(name=draft.name, namespace=draft.namespace, uid=body["metadata"]["uid"], spec=spec)
        draft.new["targetImage"] = spec.image
        source = connection.resolve(self.kube, pool)
        draft.url = source.url
        if source.url is None or source.from_copy:
            ref = spec.database.secret_ref
            message = f"Secret {ref.name!r} with key {ref.key!r} not found in namespace {pool.namespace}"
            draft.blocked(conditions.REASON_SECRET_MISSING, message)
            return
        pools = self.kube.list_pools(self.settings.namespaces)
        try:
            facts = probe_database(
                source.url,
                spec.dbos.application_name,
                timeout_seconds=self.settings.database_timeout_seconds,
                pool_prefixes=[
                    pool_connection_prefix(p["metadata"]["namespace"], names.statefulset_name(p["metadata"]["name"]))
                    for p in pools
                ],
            )
        except DatabaseUnreachableError as err:
            self._database_problem(draft, conditions.REASON_DATABASE_UNREACHABLE, f"cannot reach the database: {err}")
            return
        except DatabaseQueryError as err:
            message = f"connected to the database, but a query failed: {err}"
            self._database_problem(draft, conditions.REASON_DATABASE_QUERY_FAILED, message)
            return
        draft.new["schemaVersion"] = facts.schema_version
        if facts.foreign_applications:
            message = (
                f"the database's fireflow queues belong to application(s) {', '.join(facts.foreign_applications)}, "
                f"not {spec.dbos.application_name!r}; every pool on one database must use the same "
                f"spec.dbos.applicationName. Nothing was rolled out."
            )
            draft.blocked(conditions.REASON_APPLICATION_CONFLICT, message)
            return
        self._reconcile_children(pool, facts, pools, draft)

    def _database_problem(self, draft: StatusDraft, reason: str, message: str) -> None:
        draft.cond(conditions.CONNECTION_BUDGET, None, reason, message)
        draft.blocked(reason, message)
        draft.outcome.requeue_seconds = self.settings.resync_seconds

    def _gate(
        self, pool: Pool, facts: DatabaseFacts, draft: StatusDraft, sts: Any, live_pods: set[str]
    ) -> migration.MigrationStep:
        """Advance the migration gate one step, create the Job it asks for, and clean up finished Jobs."""
        spec, namespace = pool.spec, pool.namespace
        target = names.target_hash(spec.image, spec.dbos.application_version)
        persisted = dict(draft.old.get("migration") or {})
        saved = dict(draft.new.get("migration") or {})
        round_names = jobs.round_job_names(pool.name, saved)
        database_label = names.database_label(facts.database_key)
        # Check-then-create of an apply Job is one step per database in this process.
        with self._database_locks[database_label]:
            listed = observe.pool_jobs(self.kube, namespace, pool.name)
            records = [observe.as_migration_job(job) for job in listed.values()]
            step = migration.next_step(
                migration.MigrationInput(
                    target=target,
                    current_target=draft.new.get("currentTarget") if sts is not None else None,
                    migration=saved,
                    plan_job=observe.observation(self.kube, namespace, listed.get(round_names["plan"])),
                    apply_job=observe.observation(self.kube, namespace, listed.get(round_names["apply"])),
                    stale_apply_running=jobs.stale_apply(records, round_names["apply"]),
                    database_apply_running=observe.database_apply_running(
                        self.kube, self.settings.namespaces, database_label, namespace, pool.name
                    ),
                    schema_version=facts.schema_version,
                    pods_left=len(live_pods),
                    now=time.time(),
                    spec_key=names.migration_spec_key(target, spec.migration.model_dump(mode="json")),
                    max_attempts=spec.migration.max_attempts,
                    retry_base_seconds=self.settings.migration_retry_seconds,
                )
            )
            if step.create_job is not None:
                job = build_migration_job(
                    pool,
                    mode=step.create_job,
                    image=spec.image,
                    target=target,
                    round_=migration.job_round(step.migration),
                    database_label=database_label,
                )
                self.kube.create(self.kube.batch.create_namespaced_job, namespace, job)
        for name in jobs.jobs_to_delete(records, pool.name, persisted):
            self.kube.delete_job(namespace, name)
        for reason, message in step.events:
            draft.event("Warning" if step.failure else "Normal", reason, message)
        if step.roll_out:
            draft.new.update(
                currentTarget=target, currentImage=spec.image, currentApplicationVersion=spec.dbos.application_version
            )
        if step.schema_version is not None:
            draft.new["schemaVersion"] = step.schema_version
        return step

    def _other_needs(self, pool: Pool, pools: list[dict[str, Any]]) -> list[PoolNeed]:
        """What every other known pool may hold: its status, or what this process allowed it since."""
        needs = []
        for other in pools:
            key = (other["metadata"]["namespace"], other["metadata"]["name"])
            if key == (pool.namespace, pool.name):
                continue
            need = self._needs.get(key) or pool_need(other.get("status") or {})
            if need is not None:
                needs.append(need)
        live = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pools}
        for gone in set(self._needs) - live:
            del self._needs[gone]
        return needs

    def _scale(
        self,
        pool: Pool,
        facts: DatabaseFacts,
        pools: list[dict[str, Any]],
        draft: StatusDraft,
        sts: Any,
        step: migration.MigrationStep,
    ) -> tuple[ReplicaPlan, str | None]:
        """Replicas: desired by the spec (or its autoscaler), clamped by the budget, zero while gated; and
        why the pool is held below what it asks for, when it is."""
        spec = pool.spec
        usage = self.usage.record(f"{facts.database_key}/{facts.role}", facts.others, time.monotonic())
        saved = (draft.new.get("migration") or {}).get("replicasBefore")
        current = sts.spec.replicas if sts is not None else None
        needs_of_others: list[PoolNeed] = []

        def budget(others: Usage) -> Budget:
            return compute_budget(
                facts,
                per_replica=spec.dbos.system_database_pool_size + 1,
                headroom=spec.database.reserved_connections,
                other_pools=needs_of_others,
                others=others,
            )

        with self._budget_lock:
            needs_of_others += self._other_needs(pool, pools)
            grow = budget(usage.high)
            keep = budget(usage.low) if usage.full_window else None
            plan = plan_replicas(
                spec_replicas=spec.replicas,
                current=current,
                saved=saved,
                max_replicas=grow.max_replicas,
                max_kept=keep.max_replicas if keep is not None else (current or 0),
                hold_at_zero=step.hold_at_zero,
            )
            used = keep if keep is not None and plan.allowed > min(plan.desired, grow.max_replicas) else grow
            self._needs[(pool.namespace, pool.name)] = PoolNeed(
                facts.server, facts.database, facts.role, used.needs(plan.allowed)
            )
        if step.hold_at_zero:
            step.migration.setdefault("replicasBefore", plan.desired)
        else:
            step.migration.pop("replicasBefore", None)
        draft.new["migration"] = step.migration
        draft.new["desiredReplicas"] = 0 if step.hold_at_zero else plan.allowed
        new_budget, old_budget = used.as_status(plan.desired, plan.allowed), draft.old.get("connectionBudget") or {}
        unchanged = same_decision(old_budget, new_budget)  # then usage moved, and nothing was decided differently
        draft.new["connectionBudget"] = old_budget if unchanged else new_budget
        draft.outcome.allowed_replicas = plan.allowed
        over_budget = None
        if plan.allowed < plan.desired:
            was = conditions.condition(list(draft.new.get("conditions") or []), conditions.CONNECTION_BUDGET) or {}
            same = unchanged and was.get("status") == "False"
            message = over_budget = str(was["message"]) if same else used.explain(plan.desired)
            if not same:
                draft.event("Warning", conditions.REASON_OVER_BUDGET, message)
            draft.cond(conditions.CONNECTION_BUDGET, False, conditions.REASON_OVER_BUDGET, message)
        else:
            needs = f"{used.needs(plan.allowed)} of {facts.max_connections} connections"
            draft.cond(
                conditions.CONNECTION_BUDGET,
                True,
                conditions.REASON_WITHIN_BUDGET,
                f"{plan.allowed} replicas need {needs}",
            )
        return plan, over_budget

    def _apply_children(self, pool: Pool, draft: StatusDraft, sts: Any, plan: ReplicaPlan, rolling: bool) -> None:
        """The StatefulSet runs the rolled-out target (a new one only once the gate let it through), and a PDB."""
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
        pdb = build_pdb(pool) if wants_pdb(pool, plan.allowed) else None
        self.kube.ensure_pdb(pool.namespace, names.pdb_name(pool.name), pdb)

    def _recover(self, pool: Pool, draft: StatusDraft, replicas: int, live_pods: set[str]) -> None:
        """No stranded runs: hand back the PENDING runs of departed pods that will not return."""
        assert draft.url is not None
        sts_name, timeout = names.statefulset_name(pool.name), self.settings.database_timeout_seconds
        try:
            pending = recovery.pending_executors(draft.url, pool.namespace, sts_name, timeout_seconds=timeout)
            stranded = recovery.stranded_executors(
                pending, namespace=pool.namespace, statefulset=sts_name, replicas=replicas, live_pods=live_pods
            )
            recovered = recovery.resume_runs_of(
                draft.url, pool.spec.dbos.application_name, stranded, timeout_seconds=timeout
            )
        except (DatabaseUnreachableError, DatabaseQueryError) as err:
            draft.event("Warning", conditions.REASON_RUNS_NOT_RECOVERED, f"cannot recover runs yet: {err}")
            draft.outcome.requeue_seconds = self.settings.resync_seconds
            return
        draft.outcome.recovered_runs = recovered
        if recovered:
            draft.new["recoveredRuns"] = int(draft.new.get("recoveredRuns", 0)) + recovered
            message = f"handed {recovered} PENDING run(s) of departed {', '.join(stranded)} back to the queue"
            draft.event("Normal", "RunsRecovered", message)

    def _reconcile_children(
        self, pool: Pool, facts: DatabaseFacts, pools: list[dict[str, Any]], draft: StatusDraft
    ) -> None:
        namespace, name = pool.namespace, pool.name
        self.kube.create(self.kube.core.create_namespaced_service, namespace, build_headless_service(pool))
        sts = read_or_none(self.kube.apps.read_namespaced_stateful_set, names.statefulset_name(name), namespace)
        live_pods = self.kube.list_pod_names(namespace, names.selector_labels(name))
        step = self._gate(pool, facts, draft, sts, live_pods)
        plan, over_budget = self._scale(pool, facts, pools, draft, sts, step)
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
            over_budget=None if step.hold_at_zero else over_budget,
        )
        for kind, ok, reason, message in summary.conditions:
            draft.cond(kind, ok, reason, message)
        draft.new["phase"], draft.new["phaseReason"] = summary.phase, summary.reason
        if step.failure and not step.abandoned:
            draft.outcome.requeue_seconds = max(1.0, float(step.migration.get("retryAt", 0)) - time.time())
        elif summary.progressing:
            draft.outcome.requeue_seconds = 2.0
