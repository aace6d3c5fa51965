"""Tests of the Kubernetes test harness itself: the Go-built control plane and the process node.

The same tests run against kind (`--cluster=kind`), where real kubelets play the node. Nothing here
asserts durations: waits are generous, assertions are about what happened.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import (
    ApiextensionsV1Api,
    AppsV1Api,
    BatchV1Api,
    CoreV1Api,
    CustomObjectsApi,
    RbacAuthorizationV1Api,
)
from kubernetes.client.exceptions import ApiException

from tests.kube import images, podenv, rawapi
from tests.kube.cluster import Cluster, LocalCluster
from tests.kube.controlplane import OPERATOR_USER

Json = dict[str, Any]
WAIT = 180.0

# A tiny HTTP server. On SIGTERM it drains for a moment and exits 0, or ignores the signal when IGNORE_TERM is set.
SERVER = r"""
import http.server, os, signal, sys, time
port = int(os.environ["PORT"])
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = os.environ["POD_NAME"].encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
def on_term(*_):
    if os.environ.get("IGNORE_TERM"):
        print("ignoring SIGTERM", flush=True)
        return
    print("SIGTERM received, draining", flush=True)
    time.sleep(1)
    print("drained", flush=True)
    os._exit(0)
signal.signal(signal.SIGTERM, on_term)
server = http.server.ThreadingHTTPServer((os.environ.get("HOST", "0.0.0.0"), port), Handler)
print(f"serving {os.environ['POD_NAME']}", flush=True)
server.serve_forever()
"""


# -- helpers --------------------------------------------------------------------------------------------


def wait_for(what: str, probe: Callable[[], Any], timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def server_container(cluster: Cluster, **env: str) -> Json:
    return {
        "name": "server",
        "image": cluster.test_image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python3", "-c", SERVER],
        "ports": [{"name": "http", "containerPort": 8080}],
        "env": [
            {"name": "PORT", "value": "8080"},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            *({"name": k, "value": v} for k, v in env.items()),
        ],
        "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1},
    }


def statefulset(cluster: Cluster, name: str, replicas: int, grace: int = 30) -> Json:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "serviceName": name,
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"terminationGracePeriodSeconds": grace, "containers": [server_container(cluster)]},
            },
        },
    }


def job(cluster: Cluster, name: str, script: str, backoff_limit: int = 0, **container: Any) -> Json:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": backoff_limit,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "main", "image": cluster.test_image, "imagePullPolicy": "IfNotPresent",
                         "command": ["python3", "-c", script], **container}
                    ],
                }
            },
        },
    }  # fmt: skip


def pods(core: CoreV1Api, namespace: str, selector: str = "") -> list[Json]:
    return list(rawapi.call(core.list_namespaced_pod, namespace, label_selector=selector)["items"])


def printed(cluster: Cluster, namespace: str, pod: str) -> Callable[[], bool]:
    return lambda: f"serving {pod}" in cluster.logs(namespace, pod)


def phase_of(core: CoreV1Api, namespace: str, pod: str) -> str | None:
    phase = rawapi.call(core.read_namespaced_pod, pod, namespace).get("status", {}).get("phase")
    return None if phase is None else str(phase)


def field(path: str) -> Json:
    return {"valueFrom": {"fieldRef": {"fieldPath": path}}}


def is_ready(pod: Json) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def job_condition(batch: BatchV1Api, namespace: str, name: str, kind: str) -> Json | None:
    status = rawapi.call(batch.read_namespaced_job_status, name, namespace).get("status", {})
    return next((c for c in status.get("conditions", []) if c["type"] == kind and c["status"] == "True"), None)


class PodRecorder:
    """Records every watch event of a namespace's pods, so a test can see a pod's last status before deletion."""

    def __init__(self, core: CoreV1Api, namespace: str) -> None:
        self.events: list[tuple[str, Json]] = []
        self._stop = threading.Event()
        self._core, self._namespace = core, namespace
        start = rawapi.call(core.list_namespaced_pod, namespace)["metadata"]["resourceVersion"]
        self._thread = threading.Thread(target=self._run, args=(start,), daemon=True)
        self._thread.start()

    def _run(self, resource_version: str) -> None:
        while not self._stop.is_set():
            for event in rawapi.watch(self._core.list_namespaced_pod, self._namespace,
                                      resource_version=resource_version, timeout_seconds=2):  # fmt: skip
                resource_version = event["object"]["metadata"]["resourceVersion"]
                self.events.append((event["type"], event["object"]))

    def last_state(self, name: str) -> Json:
        """The container state of the last status the pod named `name` reported."""
        for _, pod in reversed(self.events):
            if pod["metadata"]["name"] == name and pod.get("status", {}).get("containerStatuses"):
                return dict(pod["status"]["containerStatuses"][0]["state"])
        return {}

    def deleted(self) -> list[str]:
        return [pod["metadata"]["name"] for kind, pod in self.events if kind == "DELETED"]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.fixture
def recorder(kube_cluster: Cluster, kube_namespace: str) -> Iterator[PodRecorder]:
    recording = PodRecorder(CoreV1Api(kube_cluster.api), kube_namespace)
    yield recording
    recording.close()


# -- the control plane and the node ---------------------------------------------------------------------


def test_statefulset_becomes_ready_with_stable_names_and_scales_down_gracefully(
    kube_cluster: Cluster, kube_namespace: str, recorder: PodRecorder
) -> None:
    apps, core = AppsV1Api(kube_cluster.api), CoreV1Api(kube_cluster.api)
    rawapi.call(apps.create_namespaced_stateful_set, kube_namespace, statefulset(kube_cluster, "web", 3))

    def all_ready() -> bool:
        status = rawapi.call(apps.read_namespaced_stateful_set_status, "web", kube_namespace)["status"]
        return bool(status.get("readyReplicas") == 3)

    wait_for("3 ready replicas", all_ready)
    running = pods(core, kube_namespace, "app=web")
    assert sorted(p["metadata"]["name"] for p in running) == ["web-0", "web-1", "web-2"]
    assert all(is_ready(p) for p in running)
    for name in ("web-0", "web-1", "web-2"):
        wait_for(f"{name} to print its name from the downward API", printed(kube_cluster, kube_namespace, name))

    followers = {n: kube_cluster.follow_logs(kube_namespace, n) for n in ("web-0", "web-1", "web-2")}
    rawapi.call(apps.patch_namespaced_stateful_set_scale, "web", kube_namespace, {"spec": {"replicas": 1}})
    wait_for(
        "web-1 and web-2 to be gone",
        lambda: [p["metadata"]["name"] for p in pods(core, kube_namespace, "app=web")] == ["web-0"],
    )
    # The watch may deliver the last deletion a moment after the list no longer shows the pod.
    wait_for("the watch to see both deletions", lambda: len(recorder.deleted()) == 2)
    assert recorder.deleted() == ["web-2", "web-1"]  # highest ordinal first
    for name in ("web-2", "web-1"):
        output = followers[name].text()
        # The process got SIGTERM and was allowed to finish draining: the grace period was honoured.
        assert "SIGTERM received, draining" in output and "drained" in output, output
        terminated = recorder.last_state(name).get("terminated", {})
        assert terminated.get("exitCode") == 0, recorder.last_state(name)
    assert "SIGTERM" not in followers["web-0"].text()
    for follower in followers.values():
        follower.close()


def test_process_ignoring_sigterm_is_killed_after_the_grace_period(
    kube_cluster: Cluster, kube_namespace: str, recorder: PodRecorder
) -> None:
    core = CoreV1Api(kube_cluster.api)
    pod = {
        "metadata": {"name": "stubborn"},
        "spec": {"terminationGracePeriodSeconds": 3, "containers": [server_container(kube_cluster, IGNORE_TERM="1")]},
    }
    rawapi.call(core.create_namespaced_pod, kube_namespace, pod)
    wait_for(
        "stubborn to be ready", lambda: is_ready(rawapi.call(core.read_namespaced_pod, "stubborn", kube_namespace))
    )
    with kube_cluster.follow_logs(kube_namespace, "stubborn") as follower:
        rawapi.call(core.delete_namespaced_pod, "stubborn", kube_namespace)
        wait_for("stubborn to be gone", lambda: "stubborn" in recorder.deleted())
        assert "ignoring SIGTERM" in follower.text()
    assert recorder.last_state("stubborn")["terminated"]["exitCode"] == 137  # SIGKILL


def test_deleted_statefulset_pod_comes_back_under_the_same_name(kube_cluster: Cluster, kube_namespace: str) -> None:
    apps, core = AppsV1Api(kube_cluster.api), CoreV1Api(kube_cluster.api)
    rawapi.call(apps.create_namespaced_stateful_set, kube_namespace, statefulset(kube_cluster, "db", 1, grace=5))
    first = wait_for(
        "db-0 to be ready", lambda: next((p for p in pods(core, kube_namespace, "app=db") if is_ready(p)), None)
    )
    rawapi.call(core.delete_namespaced_pod, "db-0", kube_namespace)

    def replacement() -> Json | None:
        found = [p for p in pods(core, kube_namespace, "app=db") if p["metadata"]["uid"] != first["metadata"]["uid"]]
        return found[0] if found and is_ready(found[0]) else None

    second = wait_for("a new, ready db-0", replacement)
    assert second["metadata"]["name"] == "db-0"


def test_job_completes_with_its_termination_message(kube_cluster: Cluster, kube_namespace: str) -> None:
    batch, core = BatchV1Api(kube_cluster.api), CoreV1Api(kube_cluster.api)
    script = (
        "import os\n"
        "path = os.environ.get('FIREFLOW_TERMINATION_MESSAGE_PATH', '/dev/termination-log')\n"
        "open(path, 'w').write('computed 42')\n"
        "print('done')\n"
    )
    rawapi.call(batch.create_namespaced_job, kube_namespace, job(kube_cluster, "compute", script))
    wait_for("the job to complete", lambda: job_condition(batch, kube_namespace, "compute", "Complete"))
    [pod] = pods(core, kube_namespace, "batch.kubernetes.io/job-name=compute")
    assert pod["status"]["phase"] == "Succeeded"
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"], terminated["message"]) == (0, "Completed", "computed 42")


def test_failing_job_is_retried_up_to_its_backoff_limit_and_fails(kube_cluster: Cluster, kube_namespace: str) -> None:
    batch, core = BatchV1Api(kube_cluster.api), CoreV1Api(kube_cluster.api)
    manifest = job(kube_cluster, "broken", "import sys; print('boom'); sys.exit(1)", backoff_limit=1,
                   terminationMessagePolicy="FallbackToLogsOnError")  # fmt: skip
    rawapi.call(batch.create_namespaced_job, kube_namespace, manifest)
    failed = wait_for("the job to fail", lambda: job_condition(batch, kube_namespace, "broken", "Failed"))
    assert failed["reason"] == "BackoffLimitExceeded"
    assert rawapi.call(batch.read_namespaced_job_status, "broken", kube_namespace)["status"]["failed"] == 2
    attempts = pods(core, kube_namespace, "batch.kubernetes.io/job-name=broken")
    assert len(attempts) == 2
    for pod in attempts:
        terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
        assert (pod["status"]["phase"], terminated["exitCode"], terminated["message"]) == ("Failed", 1, "boom")


def test_env_is_resolved_as_a_kubelet_does_and_secrets_are_never_printed(
    kube_cluster: Cluster, kube_namespace: str, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    core = CoreV1Api(kube_cluster.api)
    secret_value = f"s3cret-{secrets.token_hex(16)}"
    rawapi.call(core.create_namespaced_secret, kube_namespace,
                {"metadata": {"name": "creds"}, "stringData": {"token": secret_value}})  # fmt: skip
    rawapi.call(core.create_namespaced_config_map, kube_namespace,
                {"metadata": {"name": "settings"}, "data": {"greeting": "hello", "mode": "fast"}})  # fmt: skip
    script = (
        "import hashlib, json, os\n"
        "keys = ['GREETING', 'MESSAGE', 'ESCAPED', 'UNKNOWN', 'POD_NAMESPACE', 'CFG_mode', 'CFG_greeting']\n"
        "report = {k: os.environ.get(k) for k in keys}\n"
        "report['uid_set'] = len(os.environ.get('POD_UID', '')) == 36\n"
        "report['token_sha256'] = hashlib.sha256(os.environ['TOKEN'].encode()).hexdigest()\n"
        "print(json.dumps(report, sort_keys=True))\n"
    )
    pod = {
        "metadata": {"name": "envcheck"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "main", "image": kube_cluster.test_image, "imagePullPolicy": "IfNotPresent",
                "command": ["python3", "-c", script],
                "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "CFG_"}],
                "env": [
                    {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
                    {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "greeting"}}},
                    {"name": "POD_NAME", **field("metadata.name")},
                    {"name": "POD_NAMESPACE", **field("metadata.namespace")},
                    {"name": "POD_UID", **field("metadata.uid")},
                    {"name": "MESSAGE", "value": "$(GREETING) from $(POD_NAME)"},
                    {"name": "ESCAPED", "value": "$$(GREETING)"},
                    {"name": "UNKNOWN", "value": "$(NOT_DEFINED)"},
                ],
            }],
        },
    }  # fmt: skip
    rawapi.call(core.create_namespaced_pod, kube_namespace, pod)

    wait_for("envcheck to finish", lambda: phase_of(core, kube_namespace, "envcheck") in ("Succeeded", "Failed"))
    output = kube_cluster.logs(kube_namespace, "envcheck")
    report = json.loads(output.strip().splitlines()[-1])
    assert report == {
        "CFG_greeting": "hello",
        "CFG_mode": "fast",
        "ESCAPED": "$(GREETING)",
        "GREETING": "hello",
        "MESSAGE": "hello from envcheck",
        "POD_NAMESPACE": kube_namespace,
        "UNKNOWN": "$(NOT_DEFINED)",
        "token_sha256": hashlib.sha256(secret_value.encode()).hexdigest(),
        "uid_set": True,
    }

    # Nothing the harness printed, logged, stored or would put in a failure report holds the value.
    captured = capsys.readouterr()
    printed = [captured.out, captured.err, caplog.text, kube_cluster.namespace_report(kube_namespace)]
    printed.append(json.dumps(rawapi.call(core.read_namespaced_pod, "envcheck", kube_namespace)["status"]))
    if isinstance(kube_cluster, LocalCluster):
        assert kube_cluster.node is not None
        files = [p for p in kube_cluster.node.workdir.rglob("*") if p.is_file()]
        files += [p for p in kube_cluster.control_plane.workdir.glob("*.log")]
        printed += [p.read_text(errors="replace") for p in files]
    assert not [text for text in printed if secret_value in text]


def test_unknown_image_is_an_error_on_the_pod_not_a_crash(kube_cluster: Cluster, kube_namespace: str) -> None:
    core = CoreV1Api(kube_cluster.api)
    container = {"name": "main", "image": "registry.invalid/fireflow/no-such-image:1"}
    pod = {"metadata": {"name": "nowhere"}, "spec": {"containers": [container]}}
    rawapi.call(core.create_namespaced_pod, kube_namespace, pod)

    def waiting_reason() -> str | None:
        statuses = rawapi.call(core.read_namespaced_pod, "nowhere", kube_namespace).get("status", {})
        for status in statuses.get("containerStatuses", []):
            reason = status["state"].get("waiting", {}).get("reason")
            if reason in ("ErrImagePull", "ImagePullBackOff"):
                return str(reason)
        return None

    wait_for("an image pull error on the pod", waiting_reason)
    assert rawapi.call(core.read_namespaced_pod, "nowhere", kube_namespace)["status"]["phase"] == "Pending"


def test_crashing_container_is_restarted_with_back_off(kube_cluster: Cluster, kube_namespace: str) -> None:
    core = CoreV1Api(kube_cluster.api)
    pod = {"metadata": {"name": "crasher"},
           "spec": {"containers": [{"name": "main", "image": kube_cluster.test_image, "imagePullPolicy": "IfNotPresent",
                                    "command": ["python3", "-c", "print('up'); raise SystemExit(3)"]}]}}  # fmt: skip
    rawapi.call(core.create_namespaced_pod, kube_namespace, pod)

    def restarted_twice() -> Json | None:
        status = rawapi.call(core.read_namespaced_pod, "crasher", kube_namespace).get("status", {})
        containers = status.get("containerStatuses", [])
        return containers[0] if containers and containers[0]["restartCount"] >= 2 else None

    container = wait_for("two restarts", restarted_twice)
    assert container["lastState"]["terminated"]["exitCode"] == 3
    assert rawapi.call(core.read_namespaced_pod, "crasher", kube_namespace)["status"]["phase"] == "Running"


def test_service_account_pod_is_subject_to_rbac(kube_cluster: Cluster, kube_namespace: str) -> None:
    if not isinstance(kube_cluster, LocalCluster):
        pytest.skip("the test image has no Kubernetes client; kind enforces RBAC on its own")
    core, rbac = CoreV1Api(kube_cluster.api), RbacAuthorizationV1Api(kube_cluster.api)
    ns = kube_namespace
    rawapi.call(core.create_namespaced_service_account, ns, {"metadata": {"name": "reader"}})
    rawapi.call(core.create_namespaced_config_map, ns, {"metadata": {"name": "visible"}, "data": {"k": "v"}})
    rawapi.call(rbac.create_namespaced_role, ns, {
        "metadata": {"name": "read-configmaps"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}],
    })  # fmt: skip
    rawapi.call(rbac.create_namespaced_role_binding, ns, {
        "metadata": {"name": "reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-configmaps"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}],
    })  # fmt: skip
    script = (
        "import json, os\n"
        "from kubernetes import client, config\n"
        "from kubernetes.client.exceptions import ApiException\n"
        "config.load_kube_config()\n"
        "core = client.CoreV1Api()\n"
        f"data = core.read_namespaced_config_map('visible', {ns!r}).data\n"
        f"try:\n    core.list_namespaced_secret({ns!r}); secrets = 'allowed'\n"
        "except ApiException as e:\n    secrets = e.status\n"
        "print(json.dumps({'configmap': data, 'secrets': secrets}))\n"
    )
    container = {"name": "main", "image": "python:3", "command": ["python3", "-c", script]}
    pod = {
        "metadata": {"name": "rbac"},
        "spec": {"serviceAccountName": "reader", "restartPolicy": "Never", "containers": [container]},
    }
    rawapi.call(core.create_namespaced_pod, ns, pod)
    wait_for("the rbac pod to succeed", lambda: phase_of(core, ns, "rbac") == "Succeeded")
    report = json.loads(kube_cluster.logs(ns, "rbac").strip().splitlines()[-1])
    assert report == {"configmap": {"k": "v"}, "secrets": 403}


def test_crd_with_a_cel_rule_rejects_a_violating_object(kube_cluster: Cluster, kube_namespace: str) -> None:
    extensions, custom = ApiextensionsV1Api(kube_cluster.api), CustomObjectsApi(kube_cluster.api)
    group = f"{kube_namespace}.harness.fireflow.test"
    schema = {
        "type": "object",
        "properties": {"spec": {
            "type": "object",
            "properties": {"replicas": {"type": "integer"}, "minReplicas": {"type": "integer"}},
            "x-kubernetes-validations": [
                {"rule": "self.minReplicas <= self.replicas", "message": "minReplicas must not exceed replicas"}
            ],
        }},
    }  # fmt: skip
    crd = {
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}],
        },
    }
    rawapi.call(extensions.create_custom_resource_definition, crd)
    try:

        def established() -> bool:
            status = rawapi.call(extensions.read_custom_resource_definition_status, f"widgets.{group}")["status"]
            return any(c["type"] == "Established" and c["status"] == "True" for c in status.get("conditions") or [])

        wait_for("the CRD to be established", established)

        def widget(name: str, replicas: int, minimum: int) -> Json:
            return {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": name},
                    "spec": {"replicas": replicas, "minReplicas": minimum}}  # fmt: skip

        create = custom.create_namespaced_custom_object
        wait_for(
            "the new resource to be served", lambda: _try_create(create, group, kube_namespace, widget("ok", 3, 1))
        )
        with pytest.raises(ApiException) as rejected:
            rawapi.call(create, group, "v1", kube_namespace, "widgets", widget("bad", 1, 3))
        assert rejected.value.status == 422
        assert "minReplicas must not exceed replicas" in str(rejected.value.body)
    finally:
        rawapi.call(extensions.delete_custom_resource_definition, f"widgets.{group}")


def _try_create(create: Callable[..., Any], group: str, namespace: str, body: Json) -> bool:
    try:
        rawapi.call(create, group, "v1", namespace, "widgets", body)
    except ApiException as error:
        if error.status == 404:  # discovery of a just-established CRD can lag for a moment
            return False
        raise
    return True


# -- pure functions (no cluster) ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$(A)-$(B)", "1-2"),
        ("$$(A)", "$(A)"),
        ("$(MISSING)", "$(MISSING)"),
        ("$(A", "$(A"),
        ("cost: $5 $", "cost: $5 $"),
        ("$$$(A)", "$1"),
    ],
)
def test_dollar_expansion_follows_kubernetes(text: str, expected: str) -> None:
    assert podenv.expand(text, {"A": "1", "B": "2"}.get) == expected


def test_env_resolution_order_and_optional_sources() -> None:
    class Sources:
        def config_map(self, namespace: str, name: str) -> dict[str, str] | None:
            return {"a": "from-cm", "b": "cm-b"} if name == "cm" else None

        def secret(self, namespace: str, name: str) -> dict[str, str] | None:
            return None

    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {}, "status": {}}
    container = {
        "name": "c",
        "envFrom": [{"configMapRef": {"name": "cm"}}, {"secretRef": {"name": "absent", "optional": True}}],
        "env": [
            {"name": "a", "value": "overridden $(b)"},
            {"name": "LATER", "value": "$(AFTER)"},
            {"name": "AFTER", "value": "x"},
            {"name": "OPT", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k", "optional": True}}},
            {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1m"}}},
        ],
        "resources": {"limits": {"cpu": "250m"}},
    }
    env = podenv.resolve(pod, container, Sources())
    assert env == {"a": "overridden cm-b", "b": "cm-b", "LATER": "$(AFTER)", "AFTER": "x", "CPU": "250"}
    container["env"] = [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k"}}}]
    with pytest.raises(podenv.EnvConfigError, match='secret "absent" not found'):
        podenv.resolve(pod, container, Sources())


def test_image_table_matches_by_basename() -> None:
    assert images.basename("ghcr.io/acme/fireflow-worker:1.2@sha256:abc") == "fireflow-worker"
    worker = images.lookup("registry:5000/fireflow-worker:dev")
    assert worker.port_env == "FIREFLOW_HEALTH_PORT"
    assert images.lookup("fireflow-operator").port_env == "FIREFLOW_OPERATOR_METRICS_PORT"
    assert images.argv(worker, [], ["serve"]) == [worker.entrypoint[0], "serve"]
    python = images.lookup("python:3.13-slim")
    assert images.argv(python, ["/usr/local/bin/python3", "-c", "x"], [])[1:] == ["-c", "x"]
    with pytest.raises(images.UnknownImageError, match="nginx"):
        images.lookup("nginx:1.27")
    with pytest.raises(FileNotFoundError):
        images.argv(python, ["sh", "-c", "true"], [])
    assert Path(images.argv(python, [], [])[0]).name.startswith("python")


def test_audit_log_tells_the_operator_user_from_the_admin(kube_cluster: Cluster, kube_namespace: str) -> None:
    audit = kube_cluster.control_plane.audit if isinstance(kube_cluster, LocalCluster) else None
    if audit is None:
        pytest.skip("the audit log is the local control plane's")
    since = datetime.now(UTC)
    name = f"audited-{secrets.token_hex(3)}"
    rawapi.call(CoreV1Api(kube_cluster.api).create_namespaced_config_map, kube_namespace, {"metadata": {"name": name}})
    kube_cluster.kubectl(
        "--kubeconfig", str(kube_cluster.operator_kubeconfig), "get", "configmaps", "-n", kube_namespace
    )
    kube_cluster.kubectl("--kubeconfig", str(kube_cluster.operator_kubeconfig), "get", "configmap/nothing-here",
                         "-n", kube_namespace, check=False)  # fmt: skip
    requests = [r for r in audit.requests(since) if r.namespace == kube_namespace and r.resource == "configmaps"]
    by_user = {(r.user, r.verb, r.code, r.mutating) for r in requests}
    assert ("fireflow-admin", "create", 201, True) in by_user
    assert (OPERATOR_USER, "list", 200, False) in by_user
    assert (OPERATOR_USER, "get", 404, False) in by_user
    assert not [r for r in requests if r.user == OPERATOR_USER and r.mutating]
    assert audit.requests(since, since) == []  # the window's end is exclusive
