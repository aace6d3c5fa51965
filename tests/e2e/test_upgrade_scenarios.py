"""Upgrades end to end, on both clusters, with the operator installed by Helm: an online migration under a
steady stream of runs, an application-version change with long runs in flight while the operator's pod is
deleted again and again, retirement by fork, and a bad image rolled back.

On kind the migration is real: the pool starts on the worker image built with an older dbos release (an older
schema) and moves to the project's image. Locally (one venv, one dbos) the database records an older schema
version instead. Orders come from watch events (resourceVersion); no test asserts a duration.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest
from kubernetes.client import AppsV1Api, CoreV1Api

from fireflow_worker import migrate
from fireflow_worker.client import FireflowClient
from tests.e2e.harness import Json, OperatorRelease, Stage
from tests.e2e.runs import WAIT, set_schema_behind, sleep_flow
from tests.e2e.watch import Observed
from tests.kube import rawapi
from tests.support.pools import condition, wait_until
from tests.support.recorder import fewest_alive
from tests.support.upgrade_traffic import Traffic, run_rows, statuses, versions

pytestmark = pytest.mark.e2e


def _statefulsets(stage: Stage) -> list[str]:
    items = rawapi.call(AppsV1Api(stage.api).list_namespaced_stateful_set, stage.namespace)["items"]
    return sorted(s["metadata"]["name"] for s in items)


def _events(stage: Stage, reason: str) -> list[str]:
    return [str(e.get("message", "")) for e in stage.events() if e.get("reason") == reason]


def _restart_operator(operator: OperatorRelease) -> None:
    """Delete the operator's pod, as a node drain or an eviction would (its Deployment makes another)."""
    for pod in operator.pods():
        rawapi.call(CoreV1Api(operator.cluster.api).delete_namespaced_pod, pod["metadata"]["name"],
                    operator.namespace, grace_period_seconds=0)  # fmt: skip


def _worker_pods(events: list[Observed]) -> list[Observed]:
    return [e for e in events if e.kind == "Pod" and "-apply-" not in e.name and "-plan-" not in e.name]


def test_should_keep_a_steady_stream_flowing_while_an_online_migration_upgrades_the_pool(stage: Stage) -> None:
    url = stage.urls.local
    real = stage.images.worker_older_dbos is not None  # kind: an older dbos, an older schema, a real migration
    old = stage.images.worker_older_dbos or stage.images.worker_v1
    new = stage.images.worker_v1 if real else stage.images.worker_v2
    stage.apply_pool(replicas=2, image=old, migration={"lockTimeoutMs": 2000, "retries": 10})  # Online: the default
    before = stage.wait_ready(image=old, replicas=2)["status"]["schemaVersion"]
    if not real:
        set_schema_behind(url)
        before = migrate.current_version(url)
    assert before < migrate.required_version(), "the upgrade must need a migration"
    recorder = stage.record()
    traffic = Traffic(url, interval=0.2)
    time.sleep(3)
    stage.patch({"image": new})
    pool = stage.wait_ready(image=new, replicas=2)
    time.sleep(3)
    traffic.stop()
    wait_until("every run ended", lambda: not [r for r in traffic.claims().unfinished if r[1] != "LOST"], WAIT)
    claims = traffic.claims()
    print(f"online upgrade {old} -> {new}: schema {before} -> {pool['status']['schemaVersion']}, {claims.runs} runs, "
          f"longest gap between two claims {claims.longest_gap_seconds:.2f} s")  # fmt: skip
    assert claims.unfinished == [], "a run failed or was lost during the upgrade"
    assert migrate.current_version(url) == migrate.required_version() == pool["status"]["schemaVersion"]

    assert recorder.gaps == 0, "a watch expired: the recorded order may miss events"
    events = recorder.ordered()
    applies = [e for e in events if e.kind == "Job" and "-apply-" in e.name and e.image == new]
    assert applies, "the upgrade applied a migration with the new image"
    started, ended = applies[0].rv, min(e.rv for e in applies if "Complete" in e.done)
    first_new = min(e.rv for e in _worker_pods(events) if e.image == new)
    assert first_new > ended, "a worker of the new image started before its migration succeeded"
    assert fewest_alive(_worker_pods(events), started, ended) > 0, "the pool stopped serving during an online migration"


def test_should_finish_long_runs_on_their_own_version_while_the_operator_restarts_and_then_retire_it(
    stage: Stage, operator: OperatorRelease
) -> None:
    url = stage.urls.local
    stage.apply_pool(replicas=2, dbos={"applicationVersion": "1"})
    stage.wait_ready(replicas=2)
    recorder = stage.record()
    with FireflowClient(url) as client:
        old = [client.enqueue(sleep_flow(40)) for _ in range(3)]
        wait_until("the long runs claimed", lambda: statuses(url, old) == {"PENDING"}, WAIT)
        stage.patch({"dbos": {"applicationVersion": "2"}})
        _restart_operator(operator)  # mid-rollout: right after the change
        pool = stage.wait_pool("two versions, the new one ready", lambda p: len(p["status"].get("versions") or []) == 2
                               and condition(p, "Ready").get("status") == "True")  # fmt: skip
        by_version = {v["applicationVersion"]: v for v in pool["status"]["versions"]}
        assert by_version["2"]["state"] == "Current" and by_version["2"]["statefulSet"] == f"{stage.name}-v2"
        assert by_version["1"]["state"] == "Retiring" and by_version["1"]["runsLeft"]["pending"] == 3
        _restart_operator(operator)  # mid-retirement
        new = [client.enqueue(sleep_flow(0)) for _ in range(4)]
        wait_until("the new runs done", lambda: statuses(url, new) == {"SUCCESS"}, WAIT)
        assert versions(url, new) == {"2"}

        def retired() -> bool:
            gone = stage.name not in _statefulsets(stage)
            # Read after the StatefulSet: a run still PENDING now was PENDING when its workers went away.
            assert not gone or statuses(url, old) == {"SUCCESS"}, "version 1 was retired with runs left"
            return gone

        wait_until("version 1 retired", retired, WAIT)
    assert statuses(url, old) == {"SUCCESS"} and versions(url, old) == {"1"}
    wait_until("the retirement event", lambda: _events(stage, "VersionRetired"), WAIT)
    assert any("3 run(s) left (3 PENDING, 0 ENQUEUED)" in m for m in _events(stage, "VersionRetiring"))
    assert [v["applicationVersion"] for v in stage.pool()["status"]["versions"]] == ["2"]
    added = Counter(e.name for e in recorder.ordered() if e.kind in ("StatefulSet", "Job") and e.type == "ADDED")
    assert [name for name, count in added.items() if count > 1] == [], "a StatefulSet or Job was created twice"
    assert {e.name for e in recorder.ordered() if e.kind == "StatefulSet"} == {stage.name, f"{stage.name}-v2"}


def test_should_fork_what_an_old_version_still_has_after_retire_after_seconds(stage: Stage) -> None:
    url = stage.urls.local
    stage.apply_pool(replicas=1, dbos={"applicationVersion": "1"}, rollout={"retireAfterSeconds": 5})
    stage.wait_ready(replicas=1)
    with FireflowClient(url) as client:
        old = [client.enqueue(sleep_flow(300)) for _ in range(2)]
    wait_until("the long runs claimed", lambda: statuses(url, old) == {"PENDING"}, WAIT)
    stage.patch({"dbos": {"applicationVersion": "2"}})
    wait_until("the runs forked", lambda: _events(stage, "RunsForked"), WAIT)
    (message,) = _events(stage, "RunsForked")
    assert message.startswith("forked 2 run(s) of '1' onto '2': "), message
    forked = message.split(": ", 1)[1].split(", ")
    assert statuses(url, old) == {"CANCELLED"}
    wait_until("the forks claimed by version 2", lambda: run_rows(url, forked) and
               {r[:2] for r in run_rows(url, forked).values()} == {("PENDING", "2")}, WAIT)  # fmt: skip
    wait_until("version 1 retired", lambda: _statefulsets(stage) == [f"{stage.name}-v2"], WAIT)


def test_should_roll_back_a_bad_image_past_its_progress_deadline_and_keep_serving(stage: Stage) -> None:
    url, good, bad = stage.urls.local, stage.images.worker_v1, stage.images.worker_crashing
    stage.apply_pool(replicas=2, rollout={"progressDeadlineSeconds": 30, "autoRollback": True})
    stage.wait_ready(replicas=2)
    traffic = Traffic(url, interval=0.5)
    stage.patch({"image": bad})

    def rolled_back(pool: Json) -> bool:
        return bool((pool["status"].get("rollout") or {}).get("state") == "RolledBack")

    pool = stage.wait_pool("rolled back", rolled_back)
    progressing = condition(pool, "Progressing")
    assert progressing["reason"] == "RolloutStuck"
    assert progressing["message"].endswith(
        f"rolled back to {good} (application version '1') until spec.image or spec.dbos.applicationVersion changes"
    ), progressing["message"]
    stage.wait_pool("the previous image serving", lambda p: (p["status"].get("readyReplicas"),
                    p["status"].get("currentImage")) == (2, good))  # fmt: skip
    traffic.stop()
    wait_until("every run ended", lambda: not [r for r in traffic.claims().unfinished if r[1] != "LOST"], WAIT)
    assert traffic.claims().unfinished == [], "a run failed or was lost while the bad image rolled out"
    template: Any = stage.statefulset()["spec"]["template"]
    assert template["spec"]["containers"][0]["image"] == good
