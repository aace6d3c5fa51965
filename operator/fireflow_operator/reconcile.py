"""One reconcile of one pool: observe everything fresh, decide with the pure modules, act, write status.

Safe to run any number of times and from any state: creates are idempotent, Job names deterministic, and
nothing is written when nothing changed (an idle, ready pool costs the API server reads only). Reconciles
of different pools run in parallel threads; the two decisions that span pools (how many connections each
may take, which apply Job may run on a database) are taken under a lock.
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from fireflow_operator.admission import policy, queue_settings, shards
from fireflow_operator.api import conditions, names
from fireflow_operator.api.model import parse_spec
from fireflow_operator.api.pool_status import parse_status
from fireflow_operator.capacity.scaling import ReplicaPlan
from fireflow_operator.capacity.sizing import BudgetKeeper
from fireflow_operator.children import connection, netpol
from fireflow_operator.children.builders import (
    PodDefaults,
    Pool,
    build_headless_service,
    build_pdb,
    build_statefulset,
    wants_pdb,
)
from fireflow_operator.context import PoolContext
from fireflow_operator.database.dbprobe import pool_connection_prefix, probe_database
from fireflow_operator.database.facts import DatabaseFacts
from fireflow_operator.database.kept_connections import DatabaseQueryError, DatabaseUnreachableError
from fireflow_operator.kube import Kube, SecretReads, api_error
from fireflow_operator.migration import machine
from fireflow_operator.migration.gate import MigrationGate
from fireflow_operator.pool_conditions import summarize
from fireflow_operator.rollout import fleet, progress
from fireflow_operator.rollout.fleet import Fleet
from fireflow_operator.rollout.versions import CURRENT, Version
from fireflow_operator.settings import OperatorSettings
from fireflow_operator.status import Outcome, StatusDraft, first_error


def pod_defaults(settings: OperatorSettings) -> PodDefaults:
    """The installer's defaults for pools that choose none."""
    return PodDefaults(
        worker_resources=settings.worker_resources.model_dump(by_alias=True, exclude_none=True, mode="json"),
        migration_resources=settings.migration_resources.model_dump(by_alias=True, exclude_none=True, mode="json"),
    )


def _worker_prefixes(pools: list[dict[str, Any]]) -> list[str]:
    """The application_name prefixes of every known pool's workers (the budget does not count them as others)."""
    return [
        pool_connection_prefix(p["metadata"]["namespace"], names.statefulset_name(p["metadata"]["name"])) for p in pools
    ]


class Reconciler:
    def __init__(self, kube: Kube, settings: OperatorSettings) -> None:
        self.kube = kube
        self.settings = settings
        self.budgets = BudgetKeeper(settings.budget_window_seconds)
        self.gate = MigrationGate(kube, settings)
        self.fleet = Fleet(kube, settings)

    def reconcile(self, body: dict[str, Any], facts_max_age: float = 0.0) -> Outcome:
        """One reconcile; the database's facts may be up to `facts_max_age` seconds old (read for another pool on
        the same database: a resync need not look afresh, a change does)."""
        draft = StatusDraft.start(body)
        mine = shards.claim(self.settings)
        other = shards.other_claimant(
            draft.old.get("reconciledBy"), mine, draft.namespace, body["metadata"].get("labels")
        )
        if other is not None:
            draft.event("Warning", conditions.REASON_SELECTED_TWICE, shards.overlap_message(other, mine))
        draft.new["reconciledBy"] = mine
        # Every version's pods until the current version is known (then that version's, for /scale).
        draft.new["selector"] = names.workers_selector(draft.name)
        self._reconcile(body, draft, facts_max_age)
        draft.transition_events()
        # Every field is declared (the API server would drop one that is not): a drift fails here, loudly.
        parse_status(draft.new)
        self.kube.write_status(draft.namespace, draft.name, draft.old, draft.new)
        draft.outcome.status = draft.new
        return draft.outcome

    def _reconcile(self, body: dict[str, Any], draft: StatusDraft, facts_max_age: float) -> None:
        try:
            spec = parse_spec(body.get("spec") or {})
        except ValidationError as err:
            draft.blocked(conditions.REASON_INVALID_SPEC, f"{first_error(err)}; nothing was changed")
            return
        pool = Pool(draft.name, draft.namespace, body["metadata"]["uid"], spec, pod_defaults(self.settings))
        draft.new["targetImage"] = spec.image
        refusal = policy.service_account_refusal(spec, self.settings.allowed_service_accounts)
        secrets = SecretReads(self.kube, pool.namespace)  # each read once: the operator never watches Secrets
        if refusal is None and self.settings.require_shared_secrets:
            labels = {name: secrets.labels(name) for name in policy.secrets_used(spec)}
            refusal = policy.unshared_secret(spec, pool.namespace, labels)
        if refusal is not None:
            draft.blocked(refusal.reason, refusal.message)
            return
        source = connection.resolve(self.kube, pool, secrets=secrets)
        draft.url = source.url
        ref = spec.database.secret_ref
        if source.url is None or source.from_copy:
            message = f"Secret {ref.name!r} with key {ref.key!r} not found in namespace {pool.namespace}"
            draft.blocked(conditions.REASON_SECRET_MISSING, message)
            return
        refusal = policy.url_refusal(source.url, ref.name, ref.key)
        if refusal is not None:
            draft.blocked(refusal.reason, refusal.message)
            return
        self._on_database(body, PoolContext(pool, draft, source.url), facts_max_age)

    def _on_database(self, body: dict[str, Any], ctx: PoolContext, facts_max_age: float) -> None:
        """What the database says, what the pools sharing it allow, and then the children."""
        draft, spec = ctx.draft, ctx.pool.spec
        pools = self.kube.list_pools(self.settings.namespaces)
        try:
            facts = probe_database(
                ctx.url,
                spec.dbos.application_name,
                timeout_seconds=self.settings.database_timeout_seconds,
                pool_prefixes=self.kube.fleet_view(self.settings.namespaces, "worker connections", _worker_prefixes),
                max_age_seconds=facts_max_age,
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
        if self.settings.pool_selector:
            refusal = shards.shard_conflict(
                body["metadata"], facts.server, pools, self.settings.selects, self.settings.pool_selector
            )
            if refusal is not None:
                draft.blocked(refusal.reason, refusal.message)
                return
        mine = queue_settings.on_database(body, spec)
        by_database = self.kube.fleet_view(self.settings.namespaces, "by database", queue_settings.pools_by_database)
        refusal = queue_settings.conflict(
            mine, queue_settings.pools_on(facts.server, facts.database, by_database, mine)
        )
        if refusal is not None:
            draft.blocked(refusal.reason, refusal.message)
            return
        try:
            self._reconcile_children(ctx, facts, pools)
        except ApiException as err:
            if err.status not in (400, 422):
                raise
            # The API server refused a child built from the spec: say why, and wait for the spec to change.
            kind, refused = api_error(err)
            message = f"the API server refused the pool's {kind}: {refused}"
            draft.blocked(conditions.REASON_INVALID_SPEC, message)

    def _database_problem(self, draft: StatusDraft, reason: str, message: str) -> None:
        draft.cond(conditions.CONNECTION_BUDGET, None, reason, message)
        draft.blocked(reason, message)
        draft.outcome.requeue_seconds = self.settings.resync_seconds

    def _apply_children(
        self, pool: Pool, draft: StatusDraft, sts: Any, plan: ReplicaPlan, rolling: bool, current: Version
    ) -> None:
        """The current version's StatefulSet runs the rolled-out target (a new one only once the gate let it
        through), and a PDB over every version's workers."""
        if "currentTarget" in draft.new and (sts is not None or rolling):
            write = plan.write if plan.write is not None or sts is not None else plan.allowed
            desired = build_statefulset(
                pool,
                image=draft.new["currentImage"],
                application_version=draft.new["currentApplicationVersion"],
                replicas=write,
                version_index=current.index,
            )
            try:
                self.kube.upsert_statefulset(desired, sts)
            except ApiException as err:
                if err.status != 409:
                    raise
                draft.outcome.requeue_seconds = 1.0  # someone else wrote it meanwhile: look again soon
        pdb = build_pdb(pool) if wants_pdb(pool, plan.allowed) else None
        self.kube.ensure_pdb(pool.namespace, names.pdb_name(pool.name), pdb)

    def _read_sts(self, pool: Pool, index: int) -> Any:
        return self.kube.pool_statefulset(pool.namespace, pool.name, index)

    def _step(
        self, pool: Pool, facts: DatabaseFacts, draft: StatusDraft, sts: Any, live_pods: dict[str, int]
    ) -> machine.MigrationStep:
        """The gate's step; a target that was rolled back stays back until the spec names another one."""
        target = names.target_hash(pool.spec.image, pool.spec.dbos.application_version)
        if progress.held_back(draft.new.get("rollout") or {}, target):
            return machine.MigrationStep(dict(draft.new.get("migration") or {}))
        step = self.gate.step(pool, facts, draft, sts, live_pods)
        if step.schema_version is not None:
            draft.new["schemaVersion"] = step.schema_version
        if step.roll_out:
            draft.set_current(target, pool.spec.image, pool.spec.dbos.application_version)
        if step.roll_out and draft.old.get("currentTarget") != draft.new.get("currentTarget"):
            new = draft.new
            draft.new["rollout"] = progress.started(
                new["currentTarget"], new["currentImage"], new["currentApplicationVersion"], draft.old, time.time()
            )
        return step

    def _roll_versions(
        self, pool: Pool, draft: StatusDraft, listed: list[Version], current: Version, sts: Any
    ) -> tuple[list[Version], Version, Any, int | None]:
        """A rolled-out target: the current version's new image, or a new version on its own StatefulSet; and,
        for a new version, the replicas the old one ran (an autoscaler's count carries over)."""
        old_replicas = int(sts.spec.replicas or 0) if sts is not None else 0
        listed = self.fleet.roll_out(
            draft, listed, draft.new["currentImage"], draft.new["currentApplicationVersion"], old_replicas
        )
        switched = fleet.current_of(listed) or current
        if switched.index == current.index:
            return listed, current, sts, None
        return listed, switched, self._read_sts(pool, switched.index), old_replicas

    def _reconcile_children(self, ctx: PoolContext, facts: DatabaseFacts, pools: list[dict[str, Any]]) -> None:
        pool, draft = ctx.pool, ctx.draft
        name = pool.name
        self.kube.ensure_service(build_headless_service(pool))
        netpol.ensure_network_policy(self.kube, pool, draft.new)
        listed = fleet.load(draft.new)
        current = fleet.current_of(listed) or Version(pool.spec.dbos.application_version, 0, pool.spec.image, CURRENT)
        sts = self._read_sts(pool, current.index)
        live_pods = self.kube.list_worker_pods(pool.namespace, names.selector_labels(name))  # every version's
        step = self._step(pool, facts, draft, sts, live_pods)
        carried = None
        if step.roll_out:
            listed, current, sts, carried = self._roll_versions(pool, draft, listed, current, sts)
        retiring = self.fleet.plan_retiring(ctx, listed)
        kept = 0 if step.hold_at_zero else sum(r.replicas or 0 for r in retiring)
        plan, over_budget = self.budgets.plan(
            pool, facts, pools, draft, sts, step, retiring_replicas=kept, carried_replicas=carried
        )
        self._apply_children(pool, draft, sts, plan, step.roll_out, current)
        self.fleet.apply_retiring(pool, retiring, hold_at_zero=step.hold_at_zero)
        retired = {r.version.index for r in retiring if r.replicas is None}
        listed = [v for v in listed if v.index not in retired]
        # Only in steady state: the pods of a pool held at zero come back under their own ids.
        if step.migration.get("phase") == machine.DONE and not step.hold_at_zero and sts is not None:
            sizes = {names.statefulset_name(name, current.index): plan.allowed}
            sizes |= {names.statefulset_name(name, r.version.index): r.replicas or 0 for r in retiring}
            self.fleet.recover(ctx, sizes, live_pods, facts.pending_executors)
        for event in (e for r in retiring for e in r.events):
            draft.event("Normal", *event)
        self._summarize(ctx, step, listed, current, over_budget, retiring)

    def _summarize(
        self,
        ctx: PoolContext,
        step: machine.MigrationStep,
        listed: list[Version],
        current: Version,
        over_budget: str | None,
        retiring: list[fleet.Retiring],
    ) -> None:
        pool, draft = ctx.pool, ctx.draft
        sts_now = self._read_sts(pool, current.index)
        sts_status = sts_now.status if sts_now is not None else None
        problem = self.fleet.pod_problem(pool, sts_now)
        draft.new["replicas"] = int(sts_status.replicas or 0) if sts_status is not None else 0
        draft.new["readyReplicas"] = int(sts_status.ready_replicas or 0) if sts_status is not None else 0
        draft.new["selector"] = names.scale_selector(pool.name, current.index)
        verdict = self.fleet.check_progress(pool, draft, listed, sts_now)
        if verdict is not None:
            draft.new["rollout"] = verdict.rollout
        if verdict is not None and verdict.restore is not None:  # rolled back: the next reconcile applies it
            restore = verdict.restore
            draft.set_current(restore["target"], restore["image"], restore["applicationVersion"])
            draft.new["versions"] = [v.as_status() for v in verdict.versions]
        elif listed:
            self.fleet.make_current_latest(ctx, current, draft.new["readyReplicas"])
            draft.new["versions"] = self.fleet.versions_status(pool, listed, retiring)
        stuck = verdict.stuck if verdict is not None else None
        summary = summarize(
            step,
            schema_version=draft.new.get("schemaVersion"),
            target=draft.new["desiredReplicas"],
            replicas=draft.new["replicas"],
            ready=draft.new["readyReplicas"],
            updated=fleet.updated_to(sts_now, str(draft.new.get("currentImage", ""))),
            over_budget=None if step.hold_at_zero else over_budget,
            pod_problem=(problem.reason, problem.message) if problem is not None else None,
            stuck=stuck,
        )
        for kind, ok, reason, message in summary.conditions:
            draft.cond(kind, ok, reason, message)
        draft.new["phase"], draft.new["phaseReason"] = summary.phase, summary.reason
        if step.failure and not step.abandoned:
            draft.outcome.requeue_seconds = max(1.0, float(step.migration.get("retryAt", 0)) - time.time())
        elif summary.progressing or retiring:
            draft.outcome.requeue_seconds = 2.0 if summary.progressing else self.settings.resync_seconds
