"""The pool's optional NetworkPolicy: created, kept as built, deleted when disabled (I/O)."""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fireflow_operator.children.builders import Pool, build_network_policy, network_policy_name
from fireflow_operator.kube import HASH_ANNOTATION, Kube, content_hash, read_or_none

STATUS_KEY = "networkPolicy"  # in the pool's status while the operator keeps one, so that off deletes it


def ensure_network_policy(kube: Kube, pool: Pool, status: dict[str, Any]) -> None:
    """Make the NetworkPolicy match spec.networkPolicy; reads nothing for a pool that never had one."""
    api = client.NetworkingV1Api(kube.core.api_client)
    name, namespace = network_policy_name(pool.name), pool.namespace
    if not pool.spec.network_policy.enabled:
        if status.pop(STATUS_KEY, None) is not None:
            try:
                api.delete_namespaced_network_policy(name, namespace)
            except ApiException as err:
                if err.status != 404:
                    raise
        return
    desired = build_network_policy(pool)
    digest = content_hash(desired["spec"])
    desired["metadata"]["annotations"] = {HASH_ANNOTATION: digest}
    existing: Any = read_or_none(api.read_namespaced_network_policy, name, namespace)
    if existing is None:
        kube.create(api.create_namespaced_network_policy, namespace, desired)
    elif (existing.metadata.annotations or {}).get(HASH_ANNOTATION) != digest:
        desired["metadata"]["resourceVersion"] = existing.metadata.resource_version
        api.replace_namespaced_network_policy(name, namespace, desired)  # type: ignore[arg-type]
    status[STATUS_KEY] = name
