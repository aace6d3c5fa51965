"""`kubectl fireflow` against the real API server and the real operator, run as a platform team runs it: the
real kubectl finds `kubectl-fireflow` on PATH, and the plugin reads the kubeconfig from KUBECONFIG (a list of
files), its contexts and their namespaces."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import yaml
from kubernetes.client import ApiClient

from tests.kube.cluster import Cluster
from tests.kube.tools import kubectl_path, venv_bin
from tests.support.pools import (
    OperatorProcess,
    create_pool,
    create_secret,
    list_events,
    wait_for_condition,
    wait_for_pool,
)

POOL = "shown"


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
        [str(kubectl_path()), "fireflow", *args], capture_output=True, text=True, env=env, check=False, timeout=60
    )


def _ok(kubeconfig: str, *args: str) -> str:
    result = _plugin(kubeconfig, *args)
    assert result.returncode == 0 and not result.stderr, result.stderr
    return result.stdout


def _max_connections(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SHOW max_connections").fetchone()
    assert row is not None
    return int(row[0])


def test_should_show_a_pools_status_and_list_through_kubectl_fireflow(
    kube_cluster: Cluster, kube_api: ApiClient, kube_namespace: str, pool_database: str, tmp_path: Path
) -> None:
    operator = OperatorProcess(kube_cluster).start()
    try:
        create_secret(kube_api, kube_namespace, pool_database)
        create_pool(kube_api, kube_namespace, POOL, replicas=1)
        wait_for_condition(kube_api, kube_namespace, POOL, "Ready")
        wait_for_pool(kube_api, kube_namespace, POOL, "its budget", lambda p: "connectionBudget" in p["status"])
        kubeconfig = _kubeconfig(kube_cluster, kube_namespace, tmp_path)
        context = ["--context", "fireflow-test"]
        data: dict[str, Any] = json.loads(_ok(kubeconfig, "status", POOL, *context, "-o", "json"))
        as_yaml = yaml.safe_load(_ok(kubeconfig, "status", POOL, *context, "-o", "yaml"))
        text = _ok(kubeconfig, "status", POOL, *context)
        listed = _ok(kubeconfig, "list", "-A", *context)
        listed_here = json.loads(_ok(kubeconfig, "list", *context, "-o", "json"))
        missing = _plugin(kubeconfig, "status", "absent", *context)
        unreachable = _plugin(kubeconfig, "list")  # the current context: another cluster, not running
        pool_events = {
            (e.type, e.reason, " ".join(str(e.message).split()))
            for e in list_events(kube_api, kube_namespace)
            if e.involved_object.kind == "FireflowWorkerPool" and e.involved_object.name == POOL
        }
    finally:
        operator.stop()

    assert as_yaml == data
    assert (data["namespace"], data["name"], data["phase"], data["phaseReason"]) == (
        kube_namespace, POOL, "Running", "AllReplicasReady"
    )  # fmt: skip
    assert data["replicas"] == {"asked": 1, "desired": 1, "allowed": 1, "current": 1, "ready": 1}
    assert {c["type"]: (c["status"], c["reason"]) for c in data["conditions"]}["Ready"] == ("True", "AllReplicasReady")
    assert [(v["applicationVersion"], v["state"], v["statefulSet"]) for v in data["versions"]] == [
        ("1", "Current", POOL)
    ]
    assert [(w["pod"], w["ready"], w["executors"]) for w in data["workers"]] == [
        (f"{POOL}-0", True, [f"{kube_namespace}.{POOL}-0"])
    ]
    assert data["connectionBudget"]["maxConnections"] == _max_connections(pool_database)
    shown_events = {(e["type"], e["reason"], e["message"]) for e in data["events"]}
    assert shown_events and shown_events <= pool_events

    lines = text.splitlines()
    assert f"Name:                {kube_namespace}/{POOL}" in lines
    assert "Phase:               Running (AllReplicasReady)" in lines
    assert any(line.split()[:3] == ["Ready", "True", "AllReplicasReady"] for line in lines)
    assert any(line.split()[:5] == ["1", "Current", "fireflow-worker:1", POOL, "1/1"] for line in lines)
    assert any(line.split()[:4] == [f"{POOL}-0", "1", "True", "0"] and f"{kube_namespace}.{POOL}-0" in line
               for line in lines)  # fmt: skip
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
