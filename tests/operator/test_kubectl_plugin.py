"""`kubectl fireflow` against the real API server, the real operator and the pool's real PostgreSQL, run as a
platform team runs it: the real kubectl finds `kubectl-fireflow` on PATH, and the plugin reads the kubeconfig
from KUBECONFIG (a list of files), its contexts and their namespaces, and the pool's database URL from its Secret."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import yaml
from kubernetes.client import ApiClient, AppsV1Api, BatchV1Api, CoreV1Api

from fireflow_operator.api import names
from fireflow_worker import migrate
from fireflow_worker.client import FireflowClient
from tests.kube.cluster import Cluster
from tests.kube.tools import kubectl_path, venv_bin
from tests.support.pools import (
    QUICK_DBOS,
    OperatorProcess,
    create_pool,
    create_secret,
    get_pool,
    list_events,
    set_schema_behind,
    wait_for_condition,
    wait_for_pool,
    wait_until,
)
from tests.support.upgrade_traffic import run_rows, statuses

POOL = "shown"
CONTEXT = ("--context", "fireflow-test")
LONG = {"name": "long", "nodes": {"nap": {"type": "sleep", "params": {"seconds": 300}}}}
DOOMED = {
    "name": "doomed",
    "nodes": {
        "ok": {"type": "sleep", "params": {"seconds": 0}},
        "boom": {"type": "fail", "params": {"message": "no luck"}, "after": ["ok"]},
    },
}


def _kubeconfig(cluster: Cluster, namespace: str, directory: Path) -> str:
    """KUBECONFIG as a platform team has it: several files, the current context another (unreachable) cluster's,
    and the test cluster's context with the pool's namespace."""
    ours = yaml.safe_load(cluster.kubeconfig.read_text())
    ours["contexts"][0]["context"]["namespace"] = namespace
    del ours["current-context"]
    elsewhere = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "elsewhere", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "someone", "user": {"token": "not-a-secret"}}],
        "contexts": [{"name": "elsewhere", "context": {"cluster": "elsewhere", "user": "someone"}}],
        "current-context": "elsewhere",
    }
    first, second = directory / "elsewhere.yaml", directory / "test.yaml"
    first.write_text(yaml.safe_dump(elsewhere))
    second.write_text(yaml.safe_dump(ours))
    return os.pathsep.join([str(directory / "missing.yaml"), str(first), str(second)])


def _plugin(kubeconfig: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": kubeconfig, "PATH": f"{venv_bin()}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(
        [str(kubectl_path()), "fireflow", *args], capture_output=True, text=True, env=env, check=False, timeout=180
    )


def _ok(kubeconfig: str, *args: str) -> str:
    result = _plugin(kubeconfig, *args)
    assert result.returncode == 0 and not result.stderr, result.stderr
    return result.stdout


def _data(kubeconfig: str, *args: str) -> Any:
    return json.loads(_ok(kubeconfig, *args, *CONTEXT, "-o", "json"))


def _error(kubeconfig: str, *args: str) -> str:
    """The one line a refused command prints, with exit status 1 and nothing on stdout."""
    result = _plugin(kubeconfig, *args, *CONTEXT)
    assert (result.returncode, result.stdout) == (1, ""), result
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("error: "), result.stderr
    return result.stderr.removeprefix("error: ").rstrip("\n")


def _max_connections(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SHOW max_connections").fetchone()
    assert row is not None
    return int(row[0])


def _counted(url: str, namespace: str) -> tuple[int, int]:
    """(PENDING runs of the pool's executors, ENQUEUED runs), as the database says."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE status = 'PENDING' AND executor_id LIKE %s), "
            "count(*) FILTER (WHERE status = 'ENQUEUED') FROM dbos.workflow_status",
            (f"{namespace}.{POOL}-%",),
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _port(url: str) -> int:
    port = urllib.parse.urlsplit(url).port
    assert port is not None
    return port


@contextlib.contextmanager
def _ready_pool(cluster: Cluster, api: ApiClient, namespace: str, url: str, **dbos: Any) -> Iterator[OperatorProcess]:
    """The real operator, and the pool `shown` of one worker on `url` once it is Ready; the operator is stopped
    when the block ends."""
    operator = OperatorProcess(cluster).start()
    try:
        create_secret(api, namespace, url)
        create_pool(api, namespace, POOL, replicas=1, dbos={**QUICK_DBOS, **dbos})
        wait_for_condition(api, namespace, POOL, "Ready")
        yield operator
    finally:
        operator.stop()


def test_should_show_a_pools_status_and_list_through_kubectl_fireflow(
    kube_cluster: Cluster, kube_api: ApiClient, kube_namespace: str, pool_database: str, tmp_path: Path
) -> None:
    with _ready_pool(kube_cluster, kube_api, kube_namespace, pool_database, workerConcurrency=1):
        wait_for_pool(kube_api, kube_namespace, POOL, "its budget", lambda p: "connectionBudget" in p["status"])
        with FireflowClient(pool_database) as client:
            runs = [client.enqueue(LONG) for _ in range(3)]  # one runs (concurrency 1), two wait
        wait_until("one run claimed", lambda: sorted(s for s, _, _ in run_rows(pool_database, runs).values())
                   == ["ENQUEUED", "ENQUEUED", "PENDING"])  # fmt: skip
        kubeconfig = _kubeconfig(kube_cluster, kube_namespace, tmp_path)
        data: dict[str, Any] = _data(kubeconfig, "status", POOL)
        as_yaml = yaml.safe_load(_ok(kubeconfig, "status", POOL, *CONTEXT, "-o", "yaml"))
        text = _ok(kubeconfig, "status", POOL, *CONTEXT)
        counted = _counted(pool_database, kube_namespace)
        listed = _ok(kubeconfig, "list", "-A", *CONTEXT)
        listed_here = _data(kubeconfig, "list")
        forwarded = _data(kubeconfig, "status", POOL, "--database-host", f"127.0.0.1:{_port(pool_database)}")
        closed = _data(kubeconfig, "status", POOL, "--database-host", "127.0.0.1:1")
        missing = _plugin(kubeconfig, "status", "absent", *CONTEXT)
        unreachable = _plugin(kubeconfig, "list")  # the current context: another cluster, not running
        pool_events = {
            (e.type, e.reason, " ".join(str(e.message).split()))
            for e in list_events(kube_api, kube_namespace)
            if e.involved_object.kind == "FireflowWorkerPool" and e.involved_object.name == POOL
        }

    assert as_yaml["name"] == data["name"] and as_yaml["versions"] == data["versions"]
    assert (data["namespace"], data["name"], data["phase"], data["phaseReason"]) == (
        kube_namespace, POOL, "Running", "AllReplicasReady"
    )  # fmt: skip
    assert data["replicas"] == {"asked": 1, "desired": 1, "allowed": 1, "current": 1, "ready": 1}
    assert {c["type"]: (c["status"], c["reason"]) for c in data["conditions"]}["Ready"] == ("True", "AllReplicasReady")
    # Per version and per executor, what the database holds: the run claimed and the two waiting.
    assert counted == (1, 2)
    assert [(v["applicationVersion"], v["state"], v["statefulSet"], v["runs"]) for v in data["versions"]] == [
        ("1", "Current", POOL, {"pending": 1, "enqueued": 2})
    ]
    assert [(e["executor"], e["pod"], e["alive"], e["ready"], e["pending"]) for e in data["executors"]] == [
        (f"{kube_namespace}.{POOL}-0", f"{POOL}-0", True, True, 1)
    ]
    assert data["runs"] == {"source": "Secret 'fireflow-db' key 'url'", "error": None, "pending": 1, "enqueued": 2,
                            "schemaVersion": migrate.required_version()}  # fmt: skip
    assert [(w["pod"], w["ready"], w["executors"]) for w in data["workers"]] == [
        (f"{POOL}-0", True, [f"{kube_namespace}.{POOL}-0"])
    ]
    assert data["migration"]["phase"] == "Done"
    assert data["connectionBudget"]["maxConnections"] == _max_connections(pool_database)
    shown_events = {(e["type"], e["reason"], e["message"]) for e in data["events"]}
    assert shown_events and shown_events <= pool_events
    # The same database through another address of it (a forwarded port); none through a closed one, and the
    # API server's facts all the same.
    assert forwarded["runs"]["source"] == f"Secret 'fireflow-db' key 'url', at 127.0.0.1:{_port(pool_database)}"
    assert forwarded["versions"] == data["versions"]
    assert closed["runs"]["error"].startswith(f"cannot reach the database of pool {kube_namespace}/{POOL}")
    assert closed["runs"]["error"].endswith("pass --database-host 127.0.0.1:PORT (or --database-url)")
    assert closed["versions"][0]["runs"] is None and closed["phase"] == "Running"

    lines = text.splitlines()
    assert f"Name:                {kube_namespace}/{POOL}" in lines
    assert "Phase:               Running (AllReplicasReady)" in lines
    assert "Runs:                1 PENDING, 2 ENQUEUED (the database of Secret 'fireflow-db' key 'url')" in lines
    assert f"Schema version:      {migrate.required_version()} (read from the database)" in lines
    assert any(line.split()[:3] == ["Ready", "True", "AllReplicasReady"] for line in lines)
    assert ["1", "Current", "fireflow-worker:1", POOL, "1/1", "1", "2"] in [line.split() for line in lines]
    assert any(line.split()[:4] == [f"{kube_namespace}.{POOL}-0", f"{POOL}-0", "1", "True"]
               and line.split()[-1] == "1" for line in lines)  # fmt: skip
    assert f"Max connections: {_max_connections(pool_database)}" in " ".join(lines)

    rows = [line.split() for line in listed.splitlines()]
    assert rows[0][:5] == ["NAMESPACE", "NAME", "PHASE", "REASON", "READY"]
    assert [kube_namespace, POOL, "Running", "AllReplicasReady", "1/1"] in [row[:5] for row in rows]
    assert [(r["namespace"], r["name"], r["ready"]) for r in listed_here] == [(kube_namespace, POOL, "1/1")]

    assert (missing.returncode, missing.stdout) == (1, "")
    assert missing.stderr == (
        f"error: no FireflowWorkerPool 'absent' in namespace '{kube_namespace}': `kubectl fireflow list -A` lists "
        "every pool\n"
    )
    assert (unreachable.returncode, unreachable.stdout) == (1, "")
    assert unreachable.stderr.startswith(
        "error: cannot reach the API server at https://127.0.0.1:1 (context 'elsewhere')"
    )
    assert len(unreachable.stderr.splitlines()) == 1


def test_should_list_cancel_and_resume_a_pools_runs_through_kubectl_fireflow(
    kube_cluster: Cluster, kube_api: ApiClient, kube_namespace: str, pool_database: str, tmp_path: Path
) -> None:
    kubeconfig = _kubeconfig(kube_cluster, kube_namespace, tmp_path)
    with (
        _ready_pool(kube_cluster, kube_api, kube_namespace, pool_database, workerConcurrency=1),
        FireflowClient(pool_database) as client,
    ):
        failed = client.enqueue(DOOMED)
        wait_until("the doomed run failed", lambda: client.status(failed).status == "ERROR")
        running, waiting = client.enqueue(LONG), client.enqueue(LONG)
        wait_until("one run claimed", lambda: client.status(running).status == "PENDING")
        listed = _data(kubeconfig, "runs", "list", POOL)
        only_waiting = _data(kubeconfig, "runs", "list", POOL, "--status", "ENQUEUED")
        cancelled = _data(kubeconfig, "runs", "cancel", POOL, running, waiting)
        after_cancel = {run: client.status(run).status for run in (running, waiting)}
        unknown = _error(kubeconfig, "runs", "resume", POOL, "no-such-run")
        again = _ok(kubeconfig, "runs", "cancel", POOL, running, *CONTEXT)
        ended = _error(kubeconfig, "runs", "cancel", POOL, failed, waiting)
        forked = _data(kubeconfig, "runs", "resume", POOL, failed)
        wait_until("the fork failed at the same node", lambda: client.status(forked["running"]).status == "ERROR")
        fork_error = client.status(forked["running"]).error
        resumed = _data(kubeconfig, "runs", "resume", POOL, running)
        wait_until("the resumed run claimed", lambda: client.status(running).status == "PENDING")
        still_running = _error(kubeconfig, "runs", "resume", POOL, running)
        no_database = _error(kubeconfig, "runs", "list", POOL, "--database-url", "postgresql://x:y@127.0.0.1:1/z")
        _ok(kubeconfig, "runs", "cancel", POOL, running, *CONTEXT)

    executor = f"{kube_namespace}.{POOL}-0"
    assert [(r["runId"], r["status"]) for r in listed] == [(waiting, "ENQUEUED"), (running, "PENDING"),
                                                           (failed, "ERROR")]  # fmt: skip  # newest first
    assert [r["executor"] for r in listed[1:]] == [executor, executor]
    assert {r["queue"] for r in listed[:2]} == {"fireflow-executions"}
    assert [r["runId"] for r in only_waiting] == [waiting]
    assert cancelled == [{"runId": running, "was": "PENDING", "status": "CANCELLED"},
                         {"runId": waiting, "was": "ENQUEUED", "status": "CANCELLED"}]  # fmt: skip
    assert after_cancel == {running: "CANCELLED", waiting: "CANCELLED"}
    assert unknown == (
        f"there is no run 'no-such-run' on the database of pool {kube_namespace}/{POOL}: `kubectl fireflow runs list "
        f"{POOL}` lists its runs"
    )
    assert again == f"run {running} was cancelled already\n"
    assert ended == f"run {failed} already ended with ERROR; there is nothing to cancel (no run was cancelled)"
    assert resumed == {"runId": running, "was": "CANCELLED", "running": running, "queue": "fireflow-executions",
                       "fromStep": None}  # fmt: skip
    assert forked["running"] != failed and forked["fromStep"] is not None and "no luck" in str(fork_error)
    assert still_running == (
        f"run {running} is PENDING; only an ended run can be resumed (`kubectl fireflow runs cancel` ends it)"
    )
    assert no_database.startswith(f"cannot reach the database of pool {kube_namespace}/{POOL} (the URL of "
                                  "--database-url)") and "y@" not in no_database  # fmt: skip


def test_should_plan_a_migration_with_the_operators_job_through_kubectl_fireflow(
    kube_cluster: Cluster, kube_api: ApiClient, kube_namespace: str, pool_database: str, tmp_path: Path
) -> None:
    kubeconfig = _kubeconfig(kube_cluster, kube_namespace, tmp_path)
    with _ready_pool(kube_cluster, kube_api, kube_namespace, pool_database):
        current = _data(kubeconfig, "migrate", "plan", POOL)
        set_schema_behind(pool_database)
        behind = _data(kubeconfig, "migrate", "plan", POOL, "--image", "fireflow-worker:2")
        text = _ok(kubeconfig, "migrate", "plan", POOL, "--image", "fireflow-worker:2", *CONTEXT)
        no_image = _error(kubeconfig, "migrate", "plan", POOL, "--image", "registry.example/none:1")
        jobs = BatchV1Api(kube_api).list_namespaced_job(kube_namespace).items
        wait_until("the plan Jobs' pods gone", lambda: not [
            p for p in CoreV1Api(kube_api).list_namespaced_pod(kube_namespace).items
            if (p.metadata.labels or {}).get(names.LABEL_MANAGED_BY) == "kubectl-fireflow"
        ])  # fmt: skip
        pool = get_pool(kube_api, kube_namespace, POOL)

    required = migrate.required_version()
    assert current["summary"]["current_version"] == required and current["summary"]["migration_needed"] is False
    assert (current["image"], current["job"].startswith(f"{POOL}-plan-")) == ("fireflow-worker:1", True)
    assert behind["image"] == "fireflow-worker:2"
    assert (behind["summary"]["current_version"], behind["summary"]["required_version"]) == (required - 3, required)
    assert behind["summary"]["migration_needed"] is True and behind["summary"]["result"] == "ok"
    lines = text.splitlines()
    assert "Migration needed: yes" in lines and f"Schema version:   {required - 3}" in lines
    assert lines[-1].startswith(f"Plan:             schema {required - 3} is behind {required}: a migration is needed")
    assert no_image.startswith(f"the plan Job {POOL}-plan-") and "ErrImagePull" in no_image
    assert no_image.endswith("check the image (--image) and the pool's spec.imagePullSecrets")
    # Each plan Job was deleted with its pod; the operator's own gate neither adopted nor deleted them.
    assert [j.metadata.name for j in jobs if j.metadata.labels.get(names.LABEL_MANAGED_BY) == "kubectl-fireflow"] == []
    assert pool["status"]["currentImage"] == "fireflow-worker:1" and pool["status"]["migration"]["phase"] == "Done"


def test_should_hand_back_a_gone_workers_runs_and_refuse_while_its_pod_lives(
    kube_cluster: Cluster, kube_api: ApiClient, kube_namespace: str, pool_database: str, tmp_path: Path
) -> None:
    kubeconfig = _kubeconfig(kube_cluster, kube_namespace, tmp_path)
    executor = f"{kube_namespace}.{POOL}-0"
    with _ready_pool(kube_cluster, kube_api, kube_namespace, pool_database), FireflowClient(pool_database) as client:
        run = client.enqueue(LONG)
        wait_until("the run claimed", lambda: statuses(pool_database, [run]) == {"PENDING"})
    # The operator is down from here: nothing hands a gone worker's runs back but the plugin.
    alive = _error(kubeconfig, "recover", executor)
    # The StatefulSet scaled to nothing by hand: the pod goes, its worker exits after its drain, the run stays PENDING.
    AppsV1Api(kube_api).patch_namespaced_stateful_set_scale(POOL, kube_namespace, {"spec": {"replicas": 0}})
    wait_until("the pod gone", lambda: not CoreV1Api(kube_api).list_namespaced_pod(kube_namespace).items)
    assert run_rows(pool_database, [run])[run][::2] == ("PENDING", executor)
    shown = _data(kubeconfig, "status", POOL)
    recovered = _data(kubeconfig, "recover", executor)
    after = run_rows(pool_database, [run])[run]
    nothing = _ok(kubeconfig, "recover", executor, *CONTEXT)
    not_ours = _error(kubeconfig, "recover", f"{kube_namespace}.other-0")
    not_an_id = _error(kubeconfig, "recover", "local")

    assert alive == (
        f"pod {kube_namespace}/{POOL}-0 of executor {executor} still exists, and DBOS recovers its PENDING runs when "
        f"its worker starts again: if its node is gone for good, delete the pod (kubectl delete pod {POOL}-0 -n "
        f"{kube_namespace} --force) and run this again"
    )
    assert [(e["executor"], e["alive"], e["pending"]) for e in shown["executors"]] == [(executor, False, 1)]
    assert recovered == {"executor": executor, "pool": f"{kube_namespace}/{POOL}", "handedBack": 1}
    assert after[0] == "ENQUEUED"  # back on its queue, for any worker of the pool
    assert nothing == f"executor {executor} holds no PENDING run: nothing to hand back\n"
    assert not_ours.startswith(f"'{kube_namespace}.other-0' is no executor id of any FireflowWorkerPool in namespace")
    assert not_an_id == (
        "'local' is not an executor id: pass one as `kubectl fireflow status POOL` lists them (<namespace>.<pod>, "
        "-p<k> for a pod's process k)"
    )
