"""The three promises against random sequences of user actions and failures, on the real control plane.

Each numbered sequence drives one pool through a random interleaving of image changes (some needing a migration, some
reverting), two changes in quick succession, scaling, deleted worker pods, migrations that cannot take
their lock, and operator kills and restarts, while runs keep arriving. Pods and Jobs are recorded from
watches and checked afterwards (recorder.violations); then the pool must converge on the last spec with
every run finished, and finally be deleted together with its Secret without stranding a run.

`FIREFLOW_SEQUENCES` (default "1,2") chooses the sequences by number; a failing one replays exactly.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from kubernetes.client import ApiClient, BatchV1Api, CoreV1Api, CustomObjectsApi

from fireflow_operator.api.model import GROUP, PLURAL, VERSION
from fireflow_worker.client import FireflowClient
from tests.support.pools import (
    OperatorProcess,
    condition,
    create_pool,
    create_secret,
    get_pool,
    patch_pool,
    set_schema_behind,
    wait_for_pool,
    wait_until,
)
from tests.support.recorder import Recorder, violations
from tests.support.upgrade_traffic import Traffic

COMPONENT = "app.kubernetes.io/component"
SEQUENCES = [int(s) for s in os.environ.get("FIREFLOW_SEQUENCES", "1,2").split(",") if s.strip()]
SHORT = {
    "name": "short",
    "nodes": {
        "a": {"type": "sleep", "params": {"seconds": 1}},
        "b": {"type": "template", "params": {"template": "done"}, "after": ["a"]},
    },
}


class _Player:
    def __init__(self, sequence: int, api: ApiClient, namespace: str, operator: OperatorProcess, url: str) -> None:
        self.rng = random.Random(sequence)
        self.api, self.namespace, self.url = api, namespace, url
        self.operator = operator
        self.tags = 1
        self.images = ["fireflow-worker:1"]
        self.log: list[str] = []
        self.lock: psycopg.Connection[Any] | None = None

    def image(self, image: str) -> None:
        patch_pool(self.api, self.namespace, "pool", {"image": image})
        self.images.append(image)

    def new_image(self, *, needs_migration: bool) -> str:
        self.tags += 1
        if needs_migration:
            set_schema_behind(self.url)
        return f"fireflow-worker:{self.tags}"

    def act(self) -> None:
        roll = self.rng.random()
        if roll < 0.25:
            needs = self.rng.random() < 0.7
            self.log.append(f"image (migration: {needs})")
            self.image(self.new_image(needs_migration=needs))
        elif roll < 0.35:
            self.log.append("two images in quick succession")
            self.image(self.new_image(needs_migration=True))
            time.sleep(self.rng.choice([0.0, 0.5, 2.0]))
            self.image(self.new_image(needs_migration=False))
        elif roll < 0.45 and len(self.images) > 1:
            self.log.append(f"revert to {self.images[-2]}")
            self.image(self.images[-2])
        elif roll < 0.6:
            replicas = self.rng.randint(1, 3)
            self.log.append(f"scale to {replicas}")
            patch_pool(self.api, self.namespace, "pool", {"replicas": replicas})
        elif roll < 0.7:
            listed = CoreV1Api(self.api).list_namespaced_pod(self.namespace).items
            pods = [str(p.metadata.name) for p in listed if p.metadata.labels.get(COMPONENT) == "worker"]
            if pods:
                victim = self.rng.choice(pods)
                self.log.append(f"delete pod {victim}")
                CoreV1Api(self.api).delete_namespaced_pod(victim, self.namespace)
        elif roll < 0.8:
            self.log.append("kill the operator" + (" and restart it later" if roll < 0.75 else ""))
            self.operator.kill()
            if roll < 0.75:
                time.sleep(self.rng.uniform(1, 6))
            self.operator = OperatorProcess(self.operator.cluster).start()
        elif roll < 0.9 and self.lock is None:
            self.log.append("hold a lock that migrations wait for")
            self.lock = psycopg.connect(self.url)
            self.lock.execute("LOCK TABLE dbos.workflow_status IN ACCESS SHARE MODE")
        elif self.lock is not None:
            self.log.append("release the lock")
            self.lock.close()
            self.lock = None
        time.sleep(self.rng.uniform(0, 6))

    def settle(self) -> dict[str, Any]:
        if self.lock is not None:
            self.lock.close()
            self.lock = None
        last = self.images[-1]
        pool = get_pool(self.api, self.namespace, "pool")
        if condition(pool, "SchemaReady").get("reason") == "MigrationAbandoned":
            self.log.append("abandoned: change spec.migration to try again")
            patch_pool(self.api, self.namespace, "pool", {"migration": {"lockTimeoutMs": 3000}})
        return wait_for_pool(
            self.api,
            self.namespace,
            "pool",
            f"convergence on {last} after {self.log}",
            lambda p: p["status"].get("currentImage") == last and condition(p, "Ready").get("status") == "True",
        )


@pytest.mark.parametrize("sequence", SEQUENCES)
def test_should_keep_every_promise_through_a_random_sequence(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, pool_database: str, sequence: int
) -> None:
    strategy = "Offline" if sequence % 2 else "Online"  # both promises, alternately
    create_secret(kube_api, kube_namespace, pool_database)
    recorder = Recorder(kube_api, kube_namespace)
    create_pool(
        kube_api, kube_namespace, "pool", replicas=2,
        dbos={"pollingIntervalMs": 50, "shutdownDrainTimeoutMs": 1000, "systemDatabasePoolSize": 5},
        migration={"lockTimeoutMs": 500, "retries": 1, "maxAttempts": 3, "strategy": strategy},
    )  # fmt: skip
    wait_for_pool(kube_api, kube_namespace, "pool", "ready", lambda p: condition(p, "Ready").get("status") == "True")
    traffic = Traffic(pool_database, interval=0.5, flow=SHORT)
    player = _Player(sequence, kube_api, kube_namespace, operator, pool_database)
    try:
        for _ in range(10):
            player.act()
        player.settle()
        traffic.stop()
        wait_until(f"every run finished after {player.log}", lambda: not traffic.claims().unfinished, timeout=240)
        recorder.close()
        problems = violations(recorder.ordered(), online=strategy == "Online")
        if problems:
            record = Path(tempfile.mkstemp(prefix=f"sequence-{sequence}-", suffix=".jsonl")[1])
            record.write_text("".join(json.dumps(dataclasses.asdict(c)) + "\n" for c in recorder.ordered()))
            raise AssertionError(f"{problems} after {player.log}; the recorded history is in {record}")
        batch = BatchV1Api(kube_api)
        wait_until(
            "finished Jobs cleaned up but the newest failed one",
            lambda: [j.status.succeeded for j in batch.list_namespaced_job(kube_namespace).items] in ([], [None]),
        )
        # No stranded run, whichever way the workers went: the pool and its Secret go together.
        with FireflowClient(pool_database) as client:
            late = [
                client.enqueue({**SHORT, "nodes": {"a": {"type": "sleep", "params": {"seconds": 30}}}})
                for _ in range(3)
            ]
        wait_until("late runs claimed", lambda: _claimed(pool_database, late))
        CoreV1Api(kube_api).delete_namespaced_secret("fireflow-db", kube_namespace)
        CustomObjectsApi(kube_api).delete_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, "pool")
        wait_until(
            "no PENDING run of a departed worker", lambda: _claimed(pool_database, late, status="ENQUEUED"), timeout=120
        )
    finally:
        traffic.stop()
        recorder.close()
        player.operator.stop()


def _claimed(url: str, runs: list[str], status: str = "PENDING") -> bool:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT status FROM dbos.workflow_status WHERE workflow_uuid = ANY(%s)", (runs,)).fetchall()
    return len(rows) == len(runs) and all(r[0] == status for r in rows)
