"""A pool's StatefulSets, one per application version, as versions.py plans them, and what follows from them:
stranded runs handed back, the rollout's progress deadline, pod problems (I/O).

The current version's StatefulSet is sized by the spec (or its autoscaler) and the budget; every retiring
one by its own runs left, as the database counts them; a retired one is deleted. The current version is
made DBOS's latest once one of its workers is ready, so version-less runs go to it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from fireflow_operator.api import conditions, names
from fireflow_operator.children.builders import Pool, build_statefulset
from fireflow_operator.context import PoolContext
from fireflow_operator.database import recovery, versions_db
from fireflow_operator.database.kept_connections import DatabaseQueryError, DatabaseUnreachableError
from fireflow_operator.kube import Kube
from fireflow_operator.migration import observe
from fireflow_operator.rollout import health, progress, versions
from fireflow_operator.settings import OperatorSettings
from fireflow_operator.status import StatusDraft


def load(status: dict[str, Any]) -> list[versions.Version]:
    """status.versions, or the one version a pool from before versioned rollouts runs."""
    listed = [versions.Version.from_status(v) for v in status.get("versions") or []]
    if listed or "currentApplicationVersion" not in status:
        return listed
    return [versions.Version(status["currentApplicationVersion"], 0, status["currentImage"], versions.CURRENT)]


def current_of(listed: list[versions.Version]) -> versions.Version | None:
    return next((v for v in listed if v.state == versions.CURRENT), None)


@dataclass
class Retiring:
    """A retiring version's plan for this reconcile."""

    version: versions.Version
    replicas: int | None  # None: delete its StatefulSet
    pending: int = 0
    enqueued: int = 0
    events: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Progress:
    """The rollout's state for status.rollout, why it is stuck, and on a rollback what it restores."""

    rollout: dict[str, Any]
    stuck: str | None
    restore: dict[str, Any] | None = None  # the previous target (target, image, applicationVersion)
    versions: list[versions.Version] = field(default_factory=list)  # the versions once it is restored


def updated_to(sts: Any, image: str) -> int:
    """Pods of the StatefulSet at `image`, once its controller has seen the template that names it (before
    that, status.updatedReplicas still counts the previous revision's pods)."""
    if sts is None or sts.status is None or sts.spec.template.spec.containers[0].image != image:
        return 0
    if int(sts.status.observed_generation or 0) < int(sts.metadata.generation or 0):
        return 0
    return int(sts.status.updated_replicas or 0)


class Fleet:
    def __init__(self, kube: Kube, settings: OperatorSettings) -> None:
        self.kube = kube
        self.settings = settings

    def roll_out(
        self, draft: StatusDraft, listed: list[versions.Version], image: str, version: str, current_replicas: int
    ) -> list[versions.Version]:
        """The versions once `image` at application version `version` is the current target."""
        current = current_of(listed)
        if current is not None and current.application_version == version:
            return [versions.Version(version, current.index, image, versions.CURRENT), *listed[1:]]
        switched = versions.switch_to(
            listed, application_version=version, image=image, current_replicas=current_replicas, now=time.time()
        )
        if current is not None:
            message = (
                f"application version {version!r} rolled out on its own StatefulSet; "
                f"{current.application_version!r} retires"
            )
            draft.event("Normal", "VersionRollout", message)
        return switched

    def plan_retiring(self, ctx: PoolContext, listed: list[versions.Version]) -> list[Retiring]:
        retiring = [v for v in listed if v.state == versions.RETIRING]
        if not retiring:
            return []
        pool, draft, url = ctx.pool, ctx.draft, ctx.url
        spec = pool.spec
        statefulsets = [names.statefulset_name(pool.name, v.index) for v in listed]
        try:
            counts = versions_db.runs_left(
                url, namespace=pool.namespace, statefulsets=statefulsets, queues=list(spec.queues),
                versions=[v.application_version for v in retiring],
                timeout_seconds=self.settings.database_timeout_seconds,
            )  # fmt: skip
        except (DatabaseUnreachableError, DatabaseQueryError) as err:
            draft.event("Warning", "VersionCountFailed", f"cannot count the runs left of retiring versions: {err}")
            return [Retiring(v, v.max_replicas) for v in retiring]  # nothing retires on a guess
        plans = []
        for version in retiring:
            pending, enqueued = counts.get(version.application_version, (0, 0))
            plan = versions.plan_retirement(
                version, pending=pending, enqueued=enqueued, worker_concurrency=spec.dbos.worker_concurrency,
                now=time.time(), retire_after=spec.rollout.retire_after_seconds,
            )  # fmt: skip
            forked = plan.fork and self._fork(ctx, version, statefulsets)
            kept = versions.Version(**{**version.__dict__, "forked": True}) if forked else version
            plans.append(Retiring(kept, plan.replicas, pending, enqueued, plan.events))
        return plans

    def _fork(self, ctx: PoolContext, version: versions.Version, statefulsets: list[str]) -> bool:
        """Fork what `version` still has onto the current version; True once done (then never again)."""
        pool, draft, url = ctx.pool, ctx.draft, ctx.url
        current = current_of(load(draft.new)) or version
        try:
            run_ids = versions_db.runs_of_version(
                url, namespace=pool.namespace, statefulsets=statefulsets, queues=list(pool.spec.queues),
                version=version.application_version, timeout_seconds=self.settings.database_timeout_seconds,
            )  # fmt: skip
            forked = versions_db.fork_runs(
                url, pool.spec.dbos.application_name, run_ids=run_ids, to_version=current.application_version
            )
        except (DatabaseUnreachableError, DatabaseQueryError) as err:
            draft.event("Warning", "VersionForkFailed", str(err))
            return False
        if forked:  # a second attempt (its status lost) finds the runs cancelled already: nothing to say
            message = (
                f"forked {len(forked)} run(s) of {version.application_version!r} onto "
                f"{current.application_version!r}: {', '.join(forked[:20])}"
            )
            draft.event("Normal", "RunsForked", message)
        return True

    def apply_retiring(self, pool: Pool, plans: list[Retiring], *, hold_at_zero: bool) -> None:
        """Size every retiring version's StatefulSet (zero while an offline migration holds), or delete it."""
        for plan in plans:
            version = plan.version
            name = names.statefulset_name(pool.name, version.index)
            existing = self.kube.pool_statefulset(pool.namespace, pool.name, version.index)
            if plan.replicas is None:
                if existing is not None:
                    self.kube.delete_statefulset(pool.namespace, name)
                continue
            desired = build_statefulset(
                pool, image=version.image, application_version=version.application_version,
                replicas=0 if hold_at_zero else plan.replicas, version_index=version.index,
            )  # fmt: skip
            try:
                self.kube.upsert_statefulset(desired, existing)
            except ApiException as err:
                if err.status != 409:
                    raise

    def make_current_latest(self, ctx: PoolContext, current: versions.Version, ready: int) -> None:
        """Version-less runs go to DBOS's latest version: make it the current one once it serves."""
        pool, draft, url = ctx.pool, ctx.draft, ctx.url
        if ready < 1 or draft.old.get("latestVersion") == current.application_version:
            return
        try:
            if versions_db.make_latest(url, pool.spec.dbos.application_name, current.application_version):
                message = f"application version {current.application_version!r} is now DBOS's latest: new runs go to it"
                draft.event("Normal", "LatestVersion", message)
        except DatabaseQueryError as err:
            draft.event("Warning", "LatestVersionFailed", str(err))
            return
        draft.new["latestVersion"] = current.application_version

    def versions_status(
        self, pool: Pool, listed: list[versions.Version], plans: list[Retiring]
    ) -> list[dict[str, Any]]:
        """status.versions: every live version with its image, StatefulSet, replicas and runs left."""
        by_index = {plan.version.index: plan for plan in plans}
        entries = []
        for listed_version in listed:
            plan = by_index.get(listed_version.index)
            version = plan.version if plan is not None else listed_version
            name = names.statefulset_name(pool.name, version.index)
            sts = self.kube.pool_statefulset(pool.namespace, pool.name, version.index)
            status = sts.status if sts is not None else None
            entry = {
                **version.as_status(),
                "statefulSet": name,
                "replicas": int(status.replicas or 0) if status is not None else 0,
                "readyReplicas": int(status.ready_replicas or 0) if status is not None else 0,
            }
            if plan is not None:
                entry["runsLeft"] = {"pending": plan.pending, "enqueued": plan.enqueued}
            entries.append(entry)
        return entries

    def recover(
        self, ctx: PoolContext, statefulsets: dict[str, int], live_pods: dict[str, int], pending: tuple[str, ...]
    ) -> None:
        """No stranded runs: hand back the PENDING runs of departed pods that will not return, for every
        version's StatefulSet (name -> the replicas it keeps); `pending`: the database's executors with PENDING
        runs, as its probe saw them."""
        pool, draft, url = ctx.pool, ctx.draft, ctx.url
        timeout = self.settings.database_timeout_seconds
        try:
            stranded: list[str] = []
            for sts_name, replicas in statefulsets.items():
                stranded += recovery.stranded_executors(
                    pending, namespace=pool.namespace, statefulset=sts_name, replicas=replicas, live_pods=live_pods
                )
            recovered = recovery.resume_runs_of(url, pool.spec.dbos.application_name, stranded, timeout_seconds=timeout)
        except (DatabaseUnreachableError, DatabaseQueryError) as err:
            draft.event("Warning", conditions.REASON_RUNS_NOT_RECOVERED, f"cannot recover runs yet: {err}")
            draft.outcome.requeue_seconds = self.settings.resync_seconds
            return
        draft.outcome.recovered_runs = recovered
        if recovered:
            draft.new["recoveredRuns"] = int(draft.new.get("recoveredRuns", 0)) + recovered
            message = f"handed {recovered} PENDING run(s) of departed {', '.join(stranded)} back to the queue"
            draft.event("Normal", "RunsRecovered", message)

    def check_progress(
        self, pool: Pool, draft: StatusDraft, listed: list[versions.Version], sts: Any
    ) -> Progress | None:
        """The rollout's progress against its deadline, and the previous target to restore when it passed and
        the spec asks for it (applied by the next reconcile, which runs in a second); None: no rollout yet."""
        rollout = draft.new.get("rollout")
        if not rollout:
            return None
        verdict = progress.check(
            rollout,
            ready=draft.new["readyReplicas"],
            updated=updated_to(sts, str(rollout.get("image"))),
            desired=draft.new["desiredReplicas"],
            now=time.time(),
            deadline=pool.spec.rollout.progress_deadline_seconds,
            auto_rollback=pool.spec.rollout.auto_rollback,
        )
        if not verdict.roll_back:
            return Progress(verdict.rollout, verdict.stuck)
        previous = verdict.rollout["previous"]
        replicas = int(draft.new.get("desiredReplicas") or 0)
        restored = self.roll_out(draft, listed, previous["image"], previous["applicationVersion"], replicas)
        progressing = conditions.condition(list(draft.new.get("conditions") or []), conditions.PROGRESSING) or {}
        if progressing.get("reason") == conditions.REASON_ROLLOUT_STUCK:
            # Stuck already (autoRollback turned on since): no transition posts the rollback, so it is posted
            # here; otherwise Progressing's transition to RolloutStuck is its one event (status.py).
            draft.event("Warning", conditions.REASON_ROLLOUT_STUCK, verdict.stuck or "")
        draft.outcome.requeue_seconds = 1.0
        return Progress(verdict.rollout, verdict.stuck, restore=previous, versions=restored)

    def pod_problem(self, pool: Pool, sts: Any) -> health.PodProblem | None:
        """Why the pool's pods (workers and migration Jobs) cannot run, if they cannot."""
        pods = self.kube.list_pods(pool.namespace, {names.LABEL_POOL: pool.name, names.LABEL_MANAGED_BY: names.MANAGER})
        problem = health.first_pod_problem(pods)
        if problem is not None:
            return problem
        missing: dict[str, bool] = {}
        if sts is not None and sts.status is not None:
            missing[f"StatefulSet/{sts.metadata.name}"] = int(sts.status.replicas or 0) < int(sts.spec.replicas or 0)
        for job in observe.pool_jobs(self.kube, pool.namespace, pool.name).values():
            if observe.job_state(job) == "running" and not (job.status.active or 0):
                missing[f"Job/{job.metadata.name}"] = True
        if not any(missing.values()):
            return None
        events = self.kube.failed_create_events(pool.namespace)
        return health.creation_problem(events, missing, datetime.now(UTC))
