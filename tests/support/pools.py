"""Helpers of the operator tests: the operator as a real process against the Go-built control plane, and the
pools, Secrets, conditions and events the tests create and wait for."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from kubernetes.client import ApiClient, CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from fireflow_local.ports import free_port
from fireflow_operator.api.model import GROUP, KIND, PLURAL, VERSION
from tests.kube.cluster import Cluster

OPERATOR_BIN = str(Path(sys.executable).with_name("fireflow-operator"))
WAIT = 180.0
# spec.dbos for pools whose workers should claim fast and drain quickly.
QUICK_DBOS: dict[str, Any] = {"pollingIntervalMs": 50, "shutdownDrainTimeoutMs": 3000, "systemDatabasePoolSize": 5}


class OperatorProcess:
    def __init__(self, cluster: Cluster, **env: str) -> None:
        self.cluster = cluster
        self.extra_env = env
        self.log_path = Path(tempfile.mkstemp(prefix="fireflow-operator-", suffix=".log")[1])
        self.process: subprocess.Popen[bytes] | None = None
        self.environment: dict[str, str] = {}

    def start(self) -> OperatorProcess:
        env = {
            **os.environ,
            "KUBECONFIG": str(self.cluster.operator_kubeconfig),
            "FIREFLOW_OPERATOR_METRICS_HOST": "127.0.0.1",
            "FIREFLOW_OPERATOR_METRICS_PORT": str(free_port()),
            "FIREFLOW_OPERATOR_HEALTH_PORT": str(free_port()),
            "FIREFLOW_OPERATOR_RESYNC_SECONDS": "5",
            "FIREFLOW_OPERATOR_MIGRATION_RETRY_SECONDS": "3",
            **self.extra_env,
        }
        self.environment = env
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen([OPERATOR_BIN], env=env, stdout=log, stderr=subprocess.STDOUT)
        return self

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()


SHARED = {"fireflow.persistent.ai/usable-by-pools": "true"}


def create_secret(api: ApiClient, namespace: str, url: str, name: str = "fireflow-db", *, shared: bool = True) -> None:
    metadata = {"name": name, "labels": SHARED if shared else {}}
    body: Any = {"metadata": metadata, "data": {"url": base64.b64encode(url.encode()).decode()}}
    CoreV1Api(api).create_namespaced_secret(namespace, body)


def pool_body(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "FireflowWorkerPool",
        "metadata": {"name": name},
        "spec": {
            "image": "fireflow-worker:1",
            "database": {"secretRef": {"name": "fireflow-db"}},
            "dbos": {"pollingIntervalMs": 50, "shutdownDrainTimeoutMs": 3000},
            "terminationGracePeriodSeconds": 10,
            **spec,
        },
    }


def get_pool(api: ApiClient, namespace: str, name: str) -> dict[str, Any]:
    pool: Any = CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    return dict(pool)


def pool_gone(api: ApiClient, namespace: str, name: str = "pool") -> bool:
    """Whether the pool no longer exists (its finalizer let it go)."""
    try:
        CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    except ApiException as err:
        return bool(err.status == 404)
    return False


def wait_until(what: str, predicate: Callable[[], Any], timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except ApiException as err:
            if err.status != 404:
                raise
            last = None
        if last:
            return last
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def condition(pool: dict[str, Any], kind: str) -> dict[str, Any]:
    for cond in (pool.get("status") or {}).get("conditions") or []:
        if cond["type"] == kind:
            return dict(cond)
    return {}


def wait_for_pool(
    api: ApiClient, namespace: str, name: str, what: str, predicate: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """Poll the pool until `predicate(pool)` holds; returns that pool."""

    def check() -> dict[str, Any] | None:
        pool = get_pool(api, namespace, name)
        return pool if predicate(pool) else None

    result: dict[str, Any] = wait_until(what, check)
    return result


def wait_for_condition(
    api: ApiClient, namespace: str, name: str, kind: str, status: str = "True", timeout: float = WAIT
) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        pool = get_pool(api, namespace, name)
        return pool if condition(pool, kind).get("status") == status else None

    result: dict[str, Any] = wait_until(f"{name} to have {kind}={status}", check, timeout)
    return result


def create_pool(api: ApiClient, namespace: str, name: str, **spec: Any) -> None:
    CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, pool_body(name, **spec))


def patch_pool(api: ApiClient, namespace: str, name: str, spec: dict[str, Any]) -> None:
    CustomObjectsApi(api).patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, {"spec": spec})


def list_events(api: ApiClient, namespace: str) -> list[Any]:
    return list(CoreV1Api(api).list_namespaced_event(namespace).items)


def pool_events(api: ApiClient, namespace: str, name: str) -> list[tuple[str, str, str]]:
    """(type, reason, message) of the pool's events, in the order they were posted."""
    posted = [
        e for e in list_events(api, namespace) if (e.involved_object.kind, e.involved_object.name) == (KIND, name)
    ]
    posted.sort(key=lambda e: e.event_time or e.first_timestamp)
    return [(str(e.type), str(e.reason), str(e.message)) for e in posted]


def assert_no_secret(api: ApiClient, namespace: str, operator: OperatorProcess, url: str) -> None:
    password = url.split(":")[2].split("@", maxsplit=1)[0]
    listed: Any = CustomObjectsApi(api).list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
    pool_texts = [json.dumps(p.get("status")) for p in listed["items"]]
    event_texts = [f"{e.reason} {e.message}" for e in list_events(api, namespace)]
    for text in [*pool_texts, *event_texts, operator.output()]:
        assert password not in text


def rolled_out(image: str) -> Callable[[dict[str, Any]], bool]:
    return lambda p: p["status"].get("currentImage") == image and condition(p, "Ready").get("status") == "True"


def set_schema_behind(url: str) -> None:
    """Make the database need a migration again: the last three DBOS migrations are idempotent."""
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE dbos.dbos_migrations SET version = version - 3")
