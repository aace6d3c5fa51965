"""The pool's database URL: read from the user's Secret, and kept in an operator-owned copy (I/O).

The copy carries the operator's finalizer, so it survives `kubectl delete -f` of a pool together with its
Secret, `helm uninstall` of a release holding both, an Argo CD prune or the namespace's deletion, until the
pool's finalizer has handed its workers' PENDING runs back. It is owned by the pool, lives in the pool's
namespace (the same readers as the original) and is updated whenever the original changes.
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from fireflow_operator.api import names
from fireflow_operator.children.builders import Pool
from fireflow_operator.kube import Kube, SecretReads, content_hash, read_or_none, secret_data

# The operator never lists or watches Secrets: a copy it wrote is trusted for this long, then read again (one
# deleted by hand comes back then).
COPY_RECHECK_SECONDS = 600.0


@dataclass(frozen=True)
class ConnectionSource:
    url: str | None  # None: neither the Secret nor the copy has it
    from_copy: bool  # the user's Secret is gone; the URL came from the operator's copy


def read_copy(kube: Kube, namespace: str, pool_name: str) -> str | None:
    copy = read_or_none(kube.core.read_namespaced_secret, names.connection_secret_name(pool_name), namespace)
    return secret_data(copy, names.CONNECTION_KEY)


def build_copy(pool: Pool, url: str) -> dict[str, Any]:
    metadata = pool.metadata(names.connection_secret_name(pool.name), "connection")
    metadata["finalizers"] = [names.FINALIZER]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": metadata,
        "data": {names.CONNECTION_KEY: base64.b64encode(url.encode()).decode()},
    }


def sync_copy(kube: Kube, pool: Pool, url: str) -> None:
    """Create the copy, or update it when the user's Secret changed (idempotent); a copy this process wrote or
    confirmed with the same URL is not read again for COPY_RECHECK_SECONDS."""
    name = names.connection_secret_name(pool.name)
    key, held = (pool.namespace, name), content_hash([pool.uid, url])
    synced = kube.copies_synced.get(key)
    if synced is not None and synced[0] == held and time.monotonic() - synced[1] < COPY_RECHECK_SECONDS:
        return
    body = build_copy(pool, url)
    existing: Any = read_or_none(kube.core.read_namespaced_secret, name, pool.namespace)
    if existing is None:
        kube.create(kube.core.create_namespaced_secret, pool.namespace, body)
    elif secret_data(existing, names.CONNECTION_KEY) != url or names.FINALIZER not in (
        existing.metadata.finalizers or []
    ):
        kube.core.patch_namespaced_secret(
            name, pool.namespace, {"metadata": {"finalizers": [names.FINALIZER]}, "data": body["data"]}
        )
    kube.copies_synced[key] = (held, time.monotonic())


def resolve(kube: Kube, pool: Pool, *, keep_copy: bool = True, secrets: SecretReads | None = None) -> ConnectionSource:
    """The URL from the user's Secret (kept in the copy when `keep_copy`), else from the copy alone; `secrets`:
    what this reconcile already read."""
    ref = pool.spec.database.secret_ref
    url = (secrets or SecretReads(kube, pool.namespace)).value(ref.name, ref.key)
    if url is not None:
        if keep_copy:
            sync_copy(kube, pool, url)
        return ConnectionSource(url, from_copy=False)
    copied = read_copy(kube, pool.namespace, pool.name)
    return ConnectionSource(copied, from_copy=copied is not None)


def release_copy(kube: Kube, namespace: str, pool_name: str) -> None:
    """Drop the copy's finalizer and delete it: the pool's runs were handed back."""
    name = names.connection_secret_name(pool_name)
    kube.copies_synced.pop((namespace, name), None)
    try:
        kube.core.patch_namespaced_secret(name, namespace, {"metadata": {"finalizers": None}})
        kube.core.delete_namespaced_secret(name, namespace)
    except ApiException as err:
        if err.status != 404:
            raise
