"""A pool's StatefulSets, one per application version, as versions.py plans them (I/O).

The current version's StatefulSet is sized by the spec (or its autoscaler) and the budget; every retiring
one by its own runs left, as the database counts them; a retired one is deleted. The current version is
made DBOS's latest once one of its workers is ready, so version-less runs go to it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

from fireflow_operator import names, versions, versions_db
from fireflow_operator.builders import Pool, build_statefulset
from fireflow_operator.dbprobe import DatabaseQueryError, DatabaseUnreachableError
from fireflow_operator.kube import Kube, read_or_none
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


class Fleet:
    def __init__(self, kube: Kube, settings: OperatorSettings) -> None:
        self.kube = kube
        self.settings = settings

    def roll_out(
        self, draft: StatusDraft, listed: list[versions.Version], current_replicas: int
    ) -> list[versions.Version]:
        """The versions once the gate rolled out draft.new's current target."""
        image, version = draft.new["currentImage"], draft.new["currentApplicationVersion"]
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

    def plan_retiring(self, pool: Pool, draft: StatusDraft, listed: list[versions.Version]) -> list[Retiring]:
        retiring = [v for v in listed if v.state == versions.RETIRING]
        if not retiring:
            return []
        assert draft.url is not None
        spec = pool.spec
        statefulsets = [names.statefulset_name(pool.name, v.index) for v in listed]
        try:
            counts = versions_db.runs_left(
                draft.url, namespace=pool.namespace, statefulsets=statefulsets, queues=list(spec.queues),
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
            plans.append(Retiring(version, plan.replicas, pending, enqueued, plan.events))
            if plan.fork:
                self._fork(pool, draft, version, statefulsets)
        return plans

    def _fork(self, pool: Pool, draft: StatusDraft, version: versions.Version, statefulsets: list[str]) -> None:
        assert draft.url is not None
        current = current_of(load(draft.new)) or version
        try:
            run_ids = versions_db.runs_of_version(
                draft.url, namespace=pool.namespace, statefulsets=statefulsets, queues=list(pool.spec.queues),
                version=version.application_version, timeout_seconds=self.settings.database_timeout_seconds,
            )  # fmt: skip
            forked = versions_db.fork_runs(
                draft.url, pool.spec.dbos.application_name, run_ids=run_ids, to_version=current.application_version
            )
        except (DatabaseUnreachableError, DatabaseQueryError) as err:
            draft.event("Warning", "VersionForkFailed", str(err))
            return
        draft.event("Normal", "RunsForked", f"forked {len(forked)} run(s) of {version.application_version!r} onto "
                                            f"{current.application_version!r}: {', '.join(forked[:20])}")  # fmt: skip
        draft.new["versions"] = [
            {**v, "forked": True} if v.get("index") == version.index else v for v in draft.new.get("versions") or []
        ]

    def apply_retiring(self, pool: Pool, plans: list[Retiring], *, hold_at_zero: bool) -> None:
        """Size every retiring version's StatefulSet (zero while an offline migration holds), or delete it."""
        for plan in plans:
            version = plan.version
            name = names.statefulset_name(pool.name, version.index)
            existing = read_or_none(self.kube.apps.read_namespaced_stateful_set, name, pool.namespace)
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

    def make_current_latest(self, pool: Pool, draft: StatusDraft, current: versions.Version, ready: int) -> None:
        """Version-less runs go to DBOS's latest version: make it the current one once it serves."""
        if ready < 1 or draft.old.get("latestVersion") == current.application_version:
            return
        assert draft.url is not None
        try:
            if versions_db.make_latest(draft.url, pool.spec.dbos.application_name, current.application_version):
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
        for version in listed:
            name = names.statefulset_name(pool.name, version.index)
            sts = read_or_none(self.kube.apps.read_namespaced_stateful_set, name, pool.namespace)
            status = sts.status if sts is not None else None
            entry = {
                **version.as_status(),
                "statefulSet": name,
                "replicas": int(status.replicas or 0) if status is not None else 0,
                "readyReplicas": int(status.ready_replicas or 0) if status is not None else 0,
            }
            plan = by_index.get(version.index)
            if plan is not None:
                entry["runsLeft"] = {"pending": plan.pending, "enqueued": plan.enqueued}
            entries.append(entry)
        return entries
