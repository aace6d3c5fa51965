"""Thin I/O helpers over the Kubernetes API: idempotent creates, replace-if-changed, status writes.

In the running operator the pools and their children are read from what kopf's watches keep (pool_index.py,
watch_cache.py) and every write's answer is kept there too; without those (the finalizer's tests, tools) the
same helpers ask the API server.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fireflow_contract import worker_variables
from fireflow_operator.api import names
from fireflow_operator.api.model import GROUP, PLURAL, VERSION
from fireflow_operator.pool_index import PoolIndex
from fireflow_operator.watch_cache import JOBS, OWNED_SELECTOR, PDBS, PODS, SERVICES, STATEFULSETS, WatchCache

log = logging.getLogger("fireflow.operator")
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


class SecretReads:
    """The Secrets of one namespace that one reconcile needs, each read from the API server once."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self._read: dict[str, Any] = {}

    def get(self, name: str) -> Any | None:
        if name not in self._read:
            self._read[name] = self.kube.read_secret(self.namespace, name)
        return self._read[name]

    def labels(self, name: str) -> dict[str, str] | None:
        """A Secret's labels ({} when it has none), or None when it does not exist."""
        secret = self.get(name)
        return None if secret is None else dict(secret.metadata.labels or {})

    def value(self, name: str, key: str) -> str | None:
        return secret_data(self.get(name), key)


# The LIST of each cached kind: (the Kube attribute of its API group, the client's method infix).
_LISTS = {
    STATEFULSETS: ("apps", "stateful_set"),
    JOBS: ("batch", "job"),
    PODS: ("core", "pod"),
    PDBS: ("policy", "pod_disruption_budget"),
    SERVICES: ("core", "service"),
}


@dataclass
class Kube:
    """The API groups the operator uses, sharing one ApiClient."""

    core: client.CoreV1Api
    apps: client.AppsV1Api
    batch: client.BatchV1Api
    policy: client.PolicyV1Api
    custom: client.CustomObjectsApi
    pool_index: PoolIndex | None = None  # set by the running operator (handlers.py feeds it)
    children: WatchCache | None = None  # likewise
    # The connection Secret copies written or confirmed: (namespace, name) -> (what they hold, when, monotonic).
    copies_synced: dict[tuple[str, str], tuple[str, float]] = field(default_factory=dict)

    @classmethod
    def from_client(cls, api_client: client.ApiClient) -> Kube:
        return cls(
            core=client.CoreV1Api(api_client),
            apps=client.AppsV1Api(api_client),
            batch=client.BatchV1Api(api_client),
            policy=client.PolicyV1Api(api_client),
            custom=client.CustomObjectsApi(api_client),
        )

    def read_secret(self, namespace: str, name: str) -> Any | None:
        """A Secret (None when it does not exist): read from the API server each time, since the operator
        never lists or watches Secrets (its RBAC reads them one by one)."""
        return read_or_none(self.core.read_namespaced_secret, name, namespace)

    def create(self, create: Callable[..., Any], namespace: str, body: dict[str, Any]) -> None:
        """Create; "already exists" (409) counts as success, so a repeated reconcile is harmless."""
        try:
            created = create(namespace, body)
        except ApiException as err:
            if err.status != 409:
                raise
            return
        if self.children is not None:
            self.children.written(created)

    def ensure_service(self, body: dict[str, Any]) -> None:
        """Create the Service unless it exists (one deleted by hand comes back at the next reconcile)."""
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        if self.children is not None:
            existing = self.children[SERVICES].get(namespace, name)
        else:
            existing = read_or_none(self.core.read_namespaced_service, name, namespace)
        if existing is None:
            self.create(self.core.create_namespaced_service, namespace, body)

    def upsert_statefulset(self, body: dict[str, Any], existing: Any | None) -> bool:
        """Create or replace the StatefulSet when what we own in it changed; True when it wrote."""
        spec = body["spec"]
        digest = content_hash({k: v for k, v in spec.items() if k != "replicas"})
        body["metadata"].setdefault("annotations", {})[HASH_ANNOTATION] = digest
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        if existing is None:
            self.create(self.apps.create_namespaced_stateful_set, namespace, body)
            return True
        same_spec = (existing.metadata.annotations or {}).get(HASH_ANNOTATION) == digest
        same_replicas = "replicas" not in spec or existing.spec.replicas == spec["replicas"]
        if same_spec and same_replicas:
            return False
        body["metadata"]["resourceVersion"] = existing.metadata.resource_version
        if "replicas" not in spec:
            spec["replicas"] = existing.spec.replicas  # another owner's value, kept as it is
        try:
            replaced = self.apps.replace_namespaced_stateful_set(name, namespace, body)  # type: ignore[arg-type]
        except ApiException as err:
            if err.status != 404 or self.children is None:
                raise
            # Deleted while the watch was away: the cache held a ghost. Gone now; created again.
            self.children.forget(STATEFULSETS, namespace, name)
            del body["metadata"]["resourceVersion"]
            self.create(self.apps.create_namespaced_stateful_set, namespace, body)
            return True
        if self.children is not None:
            self.children.written(replaced)
        return True

    def _delete(self, delete: Callable[..., Any], kind: str, namespace: str, name: str, **options: Any) -> None:
        """Delete; already gone counts as done."""
        try:
            delete(name, namespace, **options)
        except ApiException as err:
            if err.status != 404:
                raise
        if self.children is not None:
            self.children.forget(kind, namespace, name)

    def delete_job(self, namespace: str, name: str) -> None:
        """Delete a Job and its pods; already gone counts as done."""
        self._delete(self.batch.delete_namespaced_job, JOBS, namespace, name, propagation_policy="Background")

    def delete_statefulset(self, namespace: str, name: str) -> None:
        """Delete a StatefulSet and its pods (they drain on SIGTERM); already gone counts as done."""
        delete = self.apps.delete_namespaced_stateful_set
        self._delete(delete, STATEFULSETS, namespace, name, propagation_policy="Background")

    def ensure_pdb(self, namespace: str, name: str, desired: dict[str, Any] | None) -> None:
        """Create, update or delete the PodDisruptionBudget so that it matches `desired` (None: none)."""
        if self.children is not None:
            existing = self.children[PDBS].get(namespace, name)
        else:
            existing = read_or_none(self.policy.read_namespaced_pod_disruption_budget, name, namespace)
        if desired is None:
            if existing is not None:
                self._delete(self.policy.delete_namespaced_pod_disruption_budget, PDBS, namespace, name)
            return
        if existing is None:
            self.create(self.policy.create_namespaced_pod_disruption_budget, namespace, desired)
        elif existing.spec.max_unavailable != desired["spec"]["maxUnavailable"]:
            patch = {"spec": desired["spec"]}
            try:
                patched = self.policy.patch_namespaced_pod_disruption_budget(name, namespace, patch)
            except ApiException as err:
                if err.status != 404 or self.children is None:
                    raise
                self.children.forget(PDBS, namespace, name)  # a ghost of the cache: gone, so made again
                self.create(self.policy.create_namespaced_pod_disruption_budget, namespace, desired)
                return
            if self.children is not None:
                self.children.written(patched)

    def pool_jobs(self, namespace: str, pool_name: str) -> list[Any]:
        """Every Job the operator made for the pool."""
        if self.children is not None:
            return self.children[JOBS].of_pool(namespace, pool_name, {names.LABEL_POOL: pool_name})
        selector = names.children_selector(pool_name)
        return list(self.batch.list_namespaced_job(namespace, label_selector=selector).items)

    def list_jobs(self, namespaces: list[str], labels: dict[str, str]) -> list[Any]:
        """The operator's Jobs with these labels in `namespaces`, or cluster-wide when empty."""
        if self.children is not None:
            return self.children[JOBS].matching(labels, namespaces)
        selector = names.label_selector({**labels, names.LABEL_MANAGED_BY: names.MANAGER})
        if not namespaces:
            return list(self.batch.list_job_for_all_namespaces(label_selector=selector).items)
        jobs: list[Any] = []
        for namespace in namespaces:
            jobs += self.batch.list_namespaced_job(namespace, label_selector=selector).items
        return jobs

    def list_pods(self, namespace: str, selector: dict[str, str]) -> list[Any]:
        """The pods with these labels: the operator's own (its workers and Jobs') when the cache is on."""
        if self.children is not None:
            return self.children[PODS].of_pool(namespace, _pool_in(selector), selector)
        return list(self.core.list_namespaced_pod(namespace, label_selector=names.label_selector(selector)).items)

    def failed_create_events(self, namespace: str) -> list[Any]:
        """The namespace's FailedCreate events: controllers that could not create a pod, and why."""
        return list(self.core.list_namespaced_event(namespace, field_selector="reason=FailedCreate").items)

    def list_worker_pods(self, namespace: str, selector: dict[str, str]) -> dict[str, int]:
        """Live pods by name, with the worker processes each runs (its FIREFLOW_WORKER_PROCESSES, else 1)."""
        found: dict[str, int] = {}
        for pod in self.list_pods(namespace, selector):
            env = {e.name: e.value for e in (pod.spec.containers[0].env or []) if e.value is not None}
            processes = env.get(worker_variables.PROCESSES, "1")
            found[str(pod.metadata.name)] = int(processes) if processes.isdigit() else 1
        return found

    # The pool's StatefulSets have this one home: version N's is names.statefulset_name(pool, N), reconcile, the
    # fleet and the finalizer all read them here.
    def pool_statefulset(self, namespace: str, pool_name: str, version_index: int) -> Any | None:
        """The StatefulSet of one application version of the pool (None when it does not exist)."""
        name = names.statefulset_name(pool_name, version_index)
        if self.children is not None:
            return self.children[STATEFULSETS].get(namespace, name)
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
        pods = self.core.list_namespaced_pod(namespace, label_selector=names.label_selector(selector)).items
        return {str(pod.metadata.name) for pod in pods if pod.metadata is not None}

    def job_pods(self, namespace: str, job_name: str) -> list[Any]:
        return list(self.core.list_namespaced_pod(namespace, label_selector=f"job-name={job_name}").items)

    def list_pools(self, namespaces: list[str]) -> list[dict[str, Any]]:
        """Every pool this operator may see: from the watch-fed index once the operator runs, else listed."""
        if self.pool_index is not None:
            return self.pool_index.pools(lambda: self.list_pools_now(namespaces))
        return self.list_pools_now(namespaces)

    def fleet_view(self, namespaces: list[str], name: str, build: Callable[[list[dict[str, Any]]], T]) -> T:
        """What `build` makes of every pool: made once per change of the fleet when the operator runs (the pool
        index keeps it), else from a LIST."""
        if self.pool_index is not None:
            self.pool_index.fill(lambda: self.list_pools_now(namespaces))
            return self.pool_index.derived(name, build)
        return build(self.list_pools_now(namespaces))

    def pool(self, namespace: str, name: str, namespaces: list[str]) -> dict[str, Any] | None:
        """One pool (None when it does not exist): as the watch last showed it once the operator runs."""
        if self.pool_index is not None:
            return self.pool_index.pool(namespace, name, lambda: self.list_pools_now(namespaces))
        try:
            found: Any = self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return cast(dict[str, Any], found)

    def list_owned(self, kind: str, namespaces: list[str]) -> list[dict[str, Any]]:
        """Every object of one cached kind that the operator made (its label), in `namespaces` or everywhere,
        as the JSON the watch delivers: what fills the watch cache."""
        api, method = _LISTS[kind]
        if not namespaces:
            list_all = getattr(getattr(self, api), f"list_{method}_for_all_namespaces")
            pages = [list_all(label_selector=OWNED_SELECTOR, _preload_content=False)]
        else:
            call = getattr(getattr(self, api), f"list_namespaced_{method}")
            pages = [call(ns, label_selector=OWNED_SELECTOR, _preload_content=False) for ns in namespaces]
        return [item for page in pages for item in json.loads(page.data).get("items") or []]

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
        """Write the status unless nothing changed; True when it wrote. What changed is logged (a pool that is
        written while nothing happens shows here), and the answer is what the pool index holds from now on."""
        patch = merge_patch(old, new)
        if not patch:
            return False
        written: Any = self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, name, {"status": patch}
        )
        log.info("status of %s/%s written: %s", namespace, name, ", ".join(changed_paths(patch)))
        if self.pool_index is not None and isinstance(written, dict):
            self.pool_index.observe(written)
        return True


def _pool_in(selector: dict[str, str]) -> str:
    """The pool a selector of its children names (every selector the operator uses names one)."""
    return selector.get(names.LABEL_INSTANCE) or selector.get(names.LABEL_POOL) or ""


def changed_paths(patch: dict[str, Any], prefix: str = "") -> list[str]:
    """The dotted paths a merge patch sets or removes, for the log (pure)."""
    paths: list[str] = []
    for key, value in patch.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            paths += changed_paths(value, f"{path}.")
        else:
            paths.append(path if value is not None else f"{path} (removed)")
    return paths


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
