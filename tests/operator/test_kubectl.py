"""What `kubectl` shows of a pool, on the real API server with the real operator: `kubectl get fireflow`
(the category) and the short names, the printer columns (DESIRED is what was asked for, the version, the
phase's reason), `kubectl explain` for every status field, events from `fireflow-operator`, one per
transition."""

from __future__ import annotations

import subprocess
from typing import Any

import yaml
from kubernetes.client import ApiClient

from fireflow_operator.api.conditions import set_condition
from fireflow_operator.api.crd import CRD_COPIES
from fireflow_operator.status import StatusDraft
from tests.kube.cluster import Cluster
from tests.kube.tools import REPO_ROOT, kubectl_path
from tests.support.pools import (
    OperatorProcess,
    create_pool,
    create_secret,
    list_events,
    wait_for_condition,
)


def _kubectl(cluster: Cluster, *args: str) -> str:
    # A discovery cache of its own: another test's control plane may have had this address.
    cache = cluster.kubeconfig.parent / "kubectl-cache"
    result = subprocess.run(
        [str(kubectl_path()), f"--kubeconfig={cluster.kubeconfig}", f"--cache-dir={cache}", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _status_properties() -> list[tuple[str, dict[str, Any]]]:
    crd = yaml.safe_load((REPO_ROOT / CRD_COPIES[0]).read_text())
    found = []

    def walk(node: dict[str, Any], path: str) -> None:
        for name, child in (node.get("properties") or {}).items():
            found.append((f"{path}.{name}", child))
            walk(child, f"{path}.{name}")
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{path}[]")

    walk(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"], "status")
    return found


def test_should_describe_every_status_field() -> None:
    undescribed = [path for path, schema in _status_properties() if not schema.get("description")]
    assert not undescribed


def _draft(old: list[dict[str, Any]], new: list[tuple[str, bool, str, str]]) -> StatusDraft:
    body = {"metadata": {"namespace": "ns", "name": "p", "generation": 1}, "status": {"conditions": old}}
    draft = StatusDraft.start(body)
    conditions: list[dict[str, Any]] = list(old)
    for kind, ok, reason, message in new:
        conditions = set_condition(conditions, kind, ok, reason, message, 1)
    draft.new["conditions"] = conditions
    return draft


def test_should_post_one_event_for_the_conditions_one_cause_changed() -> None:
    healthy = _draft([], [("Ready", True, "AllReplicasReady", "1/1"), ("Degraded", False, "Healthy", "fine")])
    draft = _draft(
        healthy.new["conditions"],
        [("Ready", False, "OverBudget", "1/3 replicas ready; held"), ("Degraded", True, "OverBudget", "3 need 33")],
    )
    draft.transition_events()
    assert draft.outcome.events == [("Warning", "OverBudget", "Ready=False, Degraded=True: 3 need 33")]


def test_should_post_no_event_for_a_condition_joining_a_cause_already_posted() -> None:
    over = _draft([], [("Ready", False, "ReplicasNotReady", "0/3"), ("ConnectionBudget", False, "OverBudget", "33"),
                       ("Degraded", True, "OverBudget", "33")])  # fmt: skip
    settled = _draft(over.new["conditions"], [("Ready", False, "OverBudget", "2/3 replicas ready; held")])
    settled.transition_events()
    assert settled.outcome.events == []
    within = _draft(settled.new["conditions"], [("Ready", True, "AllReplicasReady", "3/3"),
                                                ("ConnectionBudget", True, "WithinBudget", "fits"),
                                                ("Degraded", False, "Healthy", "fine")])  # fmt: skip
    again = _draft(within.new["conditions"], [("ConnectionBudget", False, "OverBudget", "44")])
    again.transition_events()  # over budget once more: a new transition
    assert again.outcome.events == [("Warning", "OverBudget", "ConnectionBudget=False: 44")]


def test_should_show_a_pool_in_kubectl_as_asked_and_as_running(
    kube_cluster: Cluster, kube_api: ApiClient, kube_namespace: str, pool_database: str
) -> None:
    operator = OperatorProcess(kube_cluster).start()
    try:
        create_secret(kube_api, kube_namespace, pool_database)
        create_pool(kube_api, kube_namespace, "shown", replicas=1)
        wait_for_condition(kube_api, kube_namespace, "shown", "Ready")
        table = _kubectl(kube_cluster, "get", "fireflow", "-n", kube_namespace)
        header, row = (line.split() for line in table.strip().splitlines())
        assert header == ["NAME", "DESIRED", "READY", "VERSION", "SCHEMA", "PHASE", "REASON", "AGE"]
        assert row[:7] == ["shown", "1", "1", "1", "125", "Running", "AllReplicasReady"]
        wide = _kubectl(kube_cluster, "get", "ffpool", "shown", "-n", kube_namespace, "-o", "wide")
        assert "fireflow-worker:1" in wide and "1/1 replicas ready" in wide
        explained = _kubectl(kube_cluster, "explain", "fireflowworkerpools.status.desiredReplicas")
        assert "fewer when the connection budget" in " ".join(explained.split())
        events = [e for e in list_events(kube_api, kube_namespace) if e.involved_object.kind == "FireflowWorkerPool"]
    finally:
        operator.stop()
    assert events
    assert {(e.source.component, e.reporting_component) for e in events} == {("fireflow-operator", "fireflow-operator")}
