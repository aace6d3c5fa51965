"""The migration gate's I/O: observe the pool's Jobs and the database's other applies, take one pure step
(machine.py), create the Job it asks for, and delete finished Jobs whose outcome the status holds.

Check-then-create of an apply Job runs under a lock per database, so that this process never starts two
on one database (each pool's reconcile runs in its own thread).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any

from fireflow_operator.api import names
from fireflow_operator.api.model import MigrationStrategy
from fireflow_operator.children.builders import Pool, build_migration_job
from fireflow_operator.database.facts import DatabaseFacts
from fireflow_operator.kube import Kube
from fireflow_operator.migration import jobs, machine, observe
from fireflow_operator.settings import OperatorSettings
from fireflow_operator.status import StatusDraft


class MigrationGate:
    def __init__(self, kube: Kube, settings: OperatorSettings) -> None:
        self.kube = kube
        self.settings = settings
        self._locks: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)

    def step(
        self, pool: Pool, facts: DatabaseFacts, draft: StatusDraft, sts: Any, live_pods: dict[str, int]
    ) -> machine.MigrationStep:
        """Advance the migration gate one step, create the Job it asks for, and clean up finished Jobs."""
        spec, namespace = pool.spec, pool.namespace
        target = names.target_hash(spec.image, spec.dbos.application_version)
        persisted = dict(draft.old.get("migration") or {})
        saved = dict(draft.new.get("migration") or {})
        round_names = jobs.round_job_names(pool.name, saved)
        database_label = names.database_label(facts.database_key)
        # Check-then-create of an apply Job is one step per database in this process.
        with self._locks[database_label]:
            listed = observe.pool_jobs(self.kube, namespace, pool.name)
            records = [observe.as_migration_job(job) for job in listed.values()]
            stale = jobs.stale_apply(records, round_names["apply"])
            step = machine.next_step(
                machine.MigrationInput(
                    target=target,
                    current_target=draft.new.get("currentTarget") if sts is not None else None,
                    migration=saved,
                    plan_job=observe.observation(self.kube, namespace, listed.get(round_names["plan"])),
                    apply_job=observe.observation(self.kube, namespace, listed.get(round_names["apply"])),
                    stale_apply_running=f"apply Job {stale.name}" if stale is not None else None,
                    stale_apply_online=stale is not None and stale.online,
                    database_apply_running=observe.database_apply_running(
                        self.kube, self.settings.namespaces, database_label, namespace, pool.name
                    ),
                    schema_version=facts.schema_version,
                    pods_left=len(live_pods),
                    now=time.time(),
                    spec_key=names.migration_spec_key(target, spec.migration.model_dump(mode="json")),
                    max_attempts=spec.migration.max_attempts,
                    retry_base_seconds=self.settings.migration_retry_seconds,
                    offline=spec.migration.strategy == MigrationStrategy.OFFLINE,
                )
            )
            if step.create_job is not None:
                job = build_migration_job(
                    pool,
                    mode=step.create_job,
                    image=spec.image,
                    target=target,
                    round_=machine.job_round(step.migration),
                    database_label=database_label,
                    online=bool(step.migration.get("online")),
                )
                self.kube.create(self.kube.batch.create_namespaced_job, namespace, job)
        for name in jobs.jobs_to_delete(records, pool.name, persisted, target, step.migration):
            self.kube.delete_job(namespace, name)
        if step.migration.get("requiredVersion"):
            draft.new["requiredSchemaVersion"] = int(step.migration["requiredVersion"])
        return step
