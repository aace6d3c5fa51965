"""Thin I/O helpers over the Kubernetes API: idempotent creates, replace-if-changed, status writes."""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fireflow_contract import worker_variables
from fireflow_operator.api import names
from fireflow_operator.api.model import GROUP, PLURAL, VERSION
from fireflow_operator.pool_index import PoolIndex

HASH_ANNOTATION = "fireflow.persistent.ai/spec-hash"
T = TypeVar("T")


def content_hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def read_or_none(read: Callable[..., T], *args: Any) -> T | None:
    try:
        return read(*args)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def secret_data(secret: Any, key: str) -> str | None:
    """One value of a Secret as text (None when the Secret or key is missing); bytes that are not UTF-8
    become U+FFFD, so a binary value fails later with a message instead of here with a traceback."""
    data = secret.data if secret is not None else None
    if not data or key not in data:
        return None
    return base64.b64decode(data[key]).decode(errors="replace").strip()


def api_error(err: ApiException) -> tuple[str, str]:
    """(the kind of object, the API server's message) of a refused write."""
    try:
        body = json.loads(err.body or "{}")
    except (ValueError, TypeError):
        body = {}
    if not isinstance(body, dict):
        body = {}
    kind = str((body.get("details") or {}).get("kind") or "child object")
    return kind, str(body.get("message") or err.reason)[:1000]


SERVICE_RECHECK_SECONDS = 600.0


@dataclass
class Kube:
    """The API groups the operator uses, sharing one ApiClient."""

    core: client.CoreV1Api
    apps: client.AppsV1Api
    batch: client.BatchV1Api
    policy: client.PolicyV1Api
    custom: client.CustomObjectsApi
    # Services known to exist, by (namespace, name, owner uid) -> when last confirmed (monotonic seconds).
    services_seen: dict[tuple[str, str, str], float] = field(default_factory=dict)
    pool_index: PoolIndex | None = None  # set by the running operator (handlers.py feeds it)

    @classmethod
    def from_client(cls, api_client: client.ApiClient) -> Kube:
        return cls(
            core=client.CoreV1Api(api_client),
            apps=client.AppsV1Api(api_client),
            batch=client.BatchV1Api(api_client),
            policy=client.PolicyV1Api(api_client),
            custom=client.CustomObjectsApi(api_client),
        )

    def secret_value(self, namespace: str, name: str, key: str) -> str | None:
        return secret_data(read_or_none(self.core.read_namespaced_secret, name, namespace), key)

    def create(self, create: Callable[..., Any], namespace: str, body: dict[str, Any]) -> None:
        """Create; "already exists" (409) counts as success, so a repeated reconcile is harmless."""
        try:
            create(namespace, body)
        except ApiException as err:
            if err.status != 409:
                raise

    def ensure_service(self, body: dict[str, Any], recheck_seconds: float = SERVICE_RECHECK_SECONDS) -> None:
        """Create the Service once; later reconciles trust it exists, and look again only after
        `recheck_seconds` (a Service deleted by hand comes back then): no write, and no read, per reconcile."""
        meta = body["metadata"]
        key = (str(meta["namespace"]), str(meta["name"]), str(meta["ownerReferences"][0]["uid"]))
        now = time.monotonic()
        if now - self.services_seen.get(key, -recheck_seconds) < recheck_seconds:
            return
        if read_or_none(self.core.read_namespaced_service, key[1], key[0]) is None:
            self.create(self.core.create_namespaced_service, key[0], body)
        self.services_seen[key] = now

    def upsert_statefulset(self, body: dict[str, Any], existing: Any | None) -> bool:
        """Create or replace the StatefulSet when what we own in it changed; True when it wrote."""
        spec = body["spec"]
        digest = content_hash({k: v for k, v in spec.items() if k != "replicas"})
        body["metadata"].setdefault("annotations", {})[HASH_ANNOTATION] = digest
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        if existing is None:
            self.create(self.apps.create_namespaced_stateful_set, namespace, body)
            return True
        current = existing.to_dict() if hasattr(existing, "to_dict") else existing
        same_spec = (current["metadata"].get("annotations") or {}).get(HASH_ANNOTATION) == digest
        same_replicas = "replicas" not in spec or current["spec"].get("replicas") == spec["replicas"]
        if same_spec and same_replicas:
            return False
        body["metadata"]["resourceVersion"] = current["metadata"]["resource_version"]
        if "replicas" not in spec:
            spec["replicas"] = current["spec"].get("replicas")  # another owner's value, kept as it is
        self.apps.replace_namespaced_stateful_set(name, namespace, body)  # type: ignore[arg-type]
        return True

    def delete_job(self, namespace: str, name: str) -> None:
        """Delete a Job and its pods; already gone counts as done."""
        try:
            self.batch.delete_namespaced_job(name, namespace, propagation_policy="Background")
        except ApiException as err:
            if err.status != 404:
                raise

    def delete_statefulset(self, namespace: str, name: str) -> None:
        """Delete a StatefulSet and its pods (they drain on SIGTERM); already gone counts as done."""
        try:
            self.apps.delete_namespaced_stateful_set(name, namespace, propagation_policy="Background")
        except ApiException as err:
            if err.status != 404:
                raise

    def ensure_pdb(self, namespace: str, name: str, desired: dict[str, Any] | None) -> None:
        """Create, update or delete the PodDisruptionBudget so that it matches `desired` (None: none)."""
        existing: Any = read_or_none(self.policy.read_namespaced_pod_disruption_budget, name, namespace)
        if desired is None:
            if existing is not None:
                self.policy.delete_namespaced_pod_disruption_budget(name, namespace)
            return
        if existing is None:
            self.create(self.policy.create_namespaced_pod_disruption_budget, namespace, desired)
        elif existing.spec.max_unavailable != desired["spec"]["maxUnavailable"]:
            self.policy.patch_namespaced_pod_disruption_budget(name, namespace, {"spec": desired["spec"]})

    def list_jobs(self, namespaces: list[str], label_selector: str) -> list[Any]:
        """Jobs matching a selector in `namespaces`, or cluster-wide when empty."""
        if not namespaces:
            return list(self.batch.list_job_for_all_namespaces(label_selector=label_selector).items)
        jobs: list[Any] = []
        for namespace in namespaces:
            jobs += self.batch.list_namespaced_job(namespace, label_selector=label_selector).items
        return jobs

    def secret_labels(self, namespace: str, name: str) -> dict[str, str] | None:
        """A Secret's labels ({} when it has none), or None when it does not exist."""
        secret: Any = read_or_none(self.core.read_namespaced_secret, name, namespace)
        return None if secret is None else dict(secret.metadata.labels or {})

    def list_pods(self, namespace: str, selector: dict[str, str]) -> list[Any]:
        label_selector = ",".join(f"{k}={v}" for k, v in selector.items())
        return list(self.core.list_namespaced_pod(namespace, label_selector=label_selector).items)

    def failed_create_events(self, namespace: str) -> list[Any]:
        """The namespace's FailedCreate events: controllers that could not create a pod, and why."""
        return list(self.core.list_namespaced_event(namespace, field_selector="reason=FailedCreate").items)

    def list_worker_pods(self, namespace: str, selector: dict[str, str]) -> dict[str, int]:
        """Live pods by name, with the worker processes each runs (its FIREFLOW_WORKER_PROCESSES, else 1)."""
        label_selector = ",".join(f"{k}={v}" for k, v in selector.items())
        found: dict[str, int] = {}
        pods: list[Any] = self.core.list_namespaced_pod(namespace, label_selector=label_selector).items
        for pod in pods:
            env = {e.name: e.value for e in (pod.spec.containers[0].env or []) if e.value is not None}
            processes = env.get(worker_variables.PROCESSES, "1")
            found[str(pod.metadata.name)] = int(processes) if processes.isdigit() else 1
        return found

    # The pool's StatefulSets have this one home: version N's is names.statefulset_name(pool, N), reconcile, the
    # fleet and the finalizer all read them here.
    def pool_statefulset(self, namespace: str, pool_name: str, version_index: int) -> Any | None:
        """The StatefulSet of one application version of the pool (None when it does not exist)."""
        name = names.statefulset_name(pool_name, version_index)
        return read_or_none(self.apps.read_namespaced_stateful_set, name, namespace)

    def pool_statefulsets(self, namespace: str, pool_name: str) -> list[Any]:
        """Every StatefulSet of the pool, one per application version (the pool's own children only)."""
        listed = self.apps.list_namespaced_stateful_set(
            namespace, label_selector=names.children_selector(pool_name)
        ).items
        return [sts for sts in listed if sts.metadata is not None]

    def scale_to_zero(self, namespace: str, name: str) -> None:
        """Scale a StatefulSet to no replicas; one deleted meanwhile (by the namespace going) is not an error.
        A patch of the StatefulSet itself, not of its /scale: the admission policies see its labels there (a
        Scale carries none), so the operator's rights cannot size anyone else's."""
        try:
            self.apps.patch_namespaced_stateful_set(name, namespace, {"spec": {"replicas": 0}})
        except ApiException as err:
            if err.status != 404:
                raise

    def pool_annotations(self, namespace: str, name: str) -> dict[str, str]:
        """The pool's annotations as stored now (a handler's body may predate its own last patch)."""
        try:
            pool = self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        except ApiException as err:
            if err.status == 404:
                return {}
            raise
        metadata: dict[str, Any] = cast(dict[str, Any], pool).get("metadata") or {}
        return dict(metadata.get("annotations") or {})

    def annotate_pool(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        patch = {"metadata": {"annotations": annotations}}
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, patch)

    def drop_other_pool_finalizers(self, namespace: str, name: str, mine: str) -> None:
        """Remove the finalizers another shard's (or an unsharded) operator left on a pool whose runs this one
        handed back, so a pool moved between shards is not kept forever by a finalizer no operator serves."""
        try:
            pool = cast(
                dict[str, Any], self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
            )
        except ApiException as err:
            if err.status == 404:
                return
            raise
        held = list(pool["metadata"].get("finalizers") or [])
        kept = [f for f in held if f == mine or not names.is_pool_finalizer(f)]
        if kept == held:
            return
        # A JSON patch tested against the list read: another writer's change in between makes it fail and retry.
        patch = [
            {"op": "test", "path": "/metadata/finalizers", "value": held},
            {"op": "replace", "path": "/metadata/finalizers", "value": kept},
        ]
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name, patch, _content_type="application/json-patch+json"
        )

    def list_pod_names(self, namespace: str, selector: dict[str, str]) -> set[str]:
        label_selector = ",".join(f"{k}={v}" for k, v in selector.items())
        pods = self.core.list_namespaced_pod(namespace, label_selector=label_selector).items
        return {str(pod.metadata.name) for pod in pods if pod.metadata is not None}

    def job_pods(self, namespace: str, job_name: str) -> list[Any]:
        return list(self.core.list_namespaced_pod(namespace, label_selector=f"job-name={job_name}").items)

    def list_pools(self, namespaces: list[str]) -> list[dict[str, Any]]:
        """Every pool this operator may see: from the watch-fed index once the operator runs, else listed."""
        if self.pool_index is not None:
            return self.pool_index.pools(lambda: self.list_pools_now(namespaces))
        return self.list_pools_now(namespaces)

    def list_pools_now(self, namespaces: list[str]) -> list[dict[str, Any]]:
        """Every pool in `namespaces`, or cluster-wide when empty, from the API server."""
        if not namespaces:
            listed: Any = self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
            return list(listed.get("items", []))
        pools: list[dict[str, Any]] = []
        for namespace in namespaces:
            listed = self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
            pools += listed.get("items", [])
        return pools

    def write_status(self, namespace: str, name: str, old: dict[str, Any], new: dict[str, Any]) -> bool:
        """Write the status unless nothing changed; True when it wrote."""
        patch = merge_patch(old, new)
        if not patch:
            return False
        self.custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, name, {"status": patch})
        return True


def merge_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that turns `old` into `new`, with only what changed: keys that vanished,
    at any depth, nulled explicitly (else the stored status keeps them and every later comparison differs)."""
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, dict) and isinstance(before, dict):
            nested = merge_patch(before, value)
            if nested:
                patch[key] = nested
        elif key not in old or before != value:
            patch[key] = value
    return patch
