"""Every kopf registration, and nothing else: the triggers of a pool's reconcile and of its finalizer, which
all go to the work queue (workqueue.py), and kopf's own settings.

A pool is reconciled when it changes, when one of its children (StatefulSet, Job, Pod) changes, when its
PodDisruptionBudget or Service goes, and every `resync_seconds`. Every watch event is kept first (pool_index.py,
watch_cache.py): reconciles read the pools and children from there, not from the API server. The children's
watches ask the API server for the operator's own objects only, by their label.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
from collections.abc import Callable, Mapping
from typing import Any

import kopf

from fireflow_contract import logformat
from fireflow_operator.api import names
from fireflow_operator.api.model import GROUP, PLURAL, VERSION
from fireflow_operator.observability import metrics
from fireflow_operator.settings import load_settings
from fireflow_operator.watch_cache import JOBS, KINDS, OWNED_SELECTOR, PDBS, PODS, SERVICES, STATEFULSETS
from fireflow_operator.workqueue import PoolWorkQueue, kubernetes_client


class DigestDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """kopf's record of the last handled pool as a digest: kopf keeps the whole spec in an annotation
    otherwise, and a large spec (a long env value) would break every patch of the 256 KiB annotation limit.
    The update handler takes no field diff, so a digest says all it needs: something changed."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> Any:
        essence = super().build(body=body, extra_fields=extra_fields)
        return {"digest": hashlib.sha256(json.dumps(essence, sort_keys=True, default=str).encode()).hexdigest()}


class _Running:
    queue: PoolWorkQueue  # in use from kopf's startup, before any other handler runs
    prepared: PoolWorkQueue | None = None  # built while this replica stood by, its pool index kept filled (main.py)
    end_standby_watch: Callable[[], None] | None = None  # what filled it ends once kopf's own watch delivers


RUNNING = _Running()
# Read at import: `main` validated the settings before importing this module.
SETTINGS = load_settings()
# A shard's pools only (FIREFLOW_OPERATOR_POOL_SELECTOR); kopf puts its finalizer on those alone.
MINE = SETTINGS.pool_selector or None


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    ours = SETTINGS
    logging.getLogger().setLevel(ours.log_level)
    RUNNING.queue = RUNNING.prepared or PoolWorkQueue(ours, kubernetes_client())
    # Our finalizer's name says what it guards; kopf keeps its own bookkeeping out of status.
    settings.persistence.finalizer = names.pool_finalizer(ours.pool_selector)
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="fireflow.persistent.ai")
    settings.persistence.diffbase_storage = DigestDiffBaseStorage(prefix="fireflow.persistent.ai")
    settings.posting.level = logging.INFO
    # Events say who wrote them: the operator (and which replica), not the framework inside it.
    settings.posting.reporting_component = names.MANAGER
    settings.posting.reporting_instance = os.environ.get("POD_NAME") or socket.gethostname()
    # Watching only some namespaces: no cluster-wide namespace/CRD scans, so no ClusterRole is needed.
    settings.scanning.disabled = bool(ours.namespaces)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)  # one line per liveness probe otherwise
    # Kopf's default 60 s watch re-lists are cheap reads; a server-side timeout keeps idle watches healthy.
    settings.watching.server_timeout = 300
    # The children's watches carry the operator's own objects only (not every pod of the cluster).
    for kind, (group, version, _model) in KINDS.items():
        settings.watching.label_selectors[group, version, kind] = OWNED_SELECTOR
    if ours.metrics_port:
        from prometheus_client import start_http_server  # noqa: PLC0415

        start_http_server(ours.metrics_port, addr=ours.metrics_host, registry=metrics.REGISTRY)


@kopf.on.event(GROUP, VERSION, PLURAL)
async def pool_seen(body: kopf.Body, type: str | None, **_: Any) -> None:
    # Every pool's latest version, other shards' too, for the budget's view of the fleet (pool_index.py).
    RUNNING.queue.observe(dict(body), deleted=type == "DELETED")
    if RUNNING.end_standby_watch is not None:  # kopf's listing of the pools is in: it takes over from here
        RUNNING.end_standby_watch()
        RUNNING.end_standby_watch = None


@kopf.on.resume(GROUP, VERSION, PLURAL, labels=MINE)
@kopf.on.create(GROUP, VERSION, PLURAL, labels=MINE)
@kopf.on.update(GROUP, VERSION, PLURAL, labels=MINE)
async def pool_changed(namespace: str | None, name: str, **_: Any) -> None:
    await RUNNING.queue.reconcile(str(namespace), name)


@kopf.timer(GROUP, VERSION, PLURAL, interval=SETTINGS.resync_seconds, initial_delay=5.0, labels=MINE)
async def pool_resync(namespace: str | None, name: str, **_: Any) -> None:
    await RUNNING.queue.reconcile(str(namespace), name, "timer")


OWNED = {names.LABEL_MANAGED_BY: names.MANAGER}


def _kept(kind: str, body: kopf.Body, type: str | None) -> bool:
    """Keep the event's object; whether it told the operator something new (a watch's re-list, or the echo of
    the operator's own write, does not)."""
    return RUNNING.queue.children.observe(kind, dict(body), deleted=type == "DELETED")


@kopf.on.event("apps", "v1", STATEFULSETS, labels=OWNED)
async def statefulset_changed(body: kopf.Body, type: str | None, labels: Mapping[str, str], **_: Any) -> None:
    await _child_changed(STATEFULSETS, body, type, labels)


@kopf.on.event("batch", "v1", JOBS, labels=OWNED)
async def job_changed(body: kopf.Body, type: str | None, labels: Mapping[str, str], **_: Any) -> None:
    await _child_changed(JOBS, body, type, labels)


@kopf.on.event("", "v1", PODS, labels=OWNED)
async def pod_changed(body: kopf.Body, type: str | None, labels: Mapping[str, str], **_: Any) -> None:
    await _child_changed(PODS, body, type, labels)


@kopf.on.event("policy", "v1", PDBS, labels=OWNED)
async def pdb_seen(body: kopf.Body, type: str | None, labels: Mapping[str, str], **_: Any) -> None:
    # Its status follows every pod; only its deletion is news (the reconcile makes it again).
    await _child_changed(PDBS, body, type, labels, only_deletion=True)


@kopf.on.event("", "v1", SERVICES, labels=OWNED)
async def service_seen(body: kopf.Body, type: str | None, labels: Mapping[str, str], **_: Any) -> None:
    await _child_changed(SERVICES, body, type, labels, only_deletion=True)


async def _child_changed(
    kind: str, body: kopf.Body, type: str | None, labels: Mapping[str, str], *, only_deletion: bool = False
) -> None:
    """Keep the child; reconcile its pool when the child changed (or, `only_deletion`, went)."""
    namespace, pool = str(body.metadata.namespace), labels.get(names.LABEL_POOL)
    if pool:
        logformat.enter_pool(namespace, pool)  # kopf's line about this handler names the pool beside the child
    news = _kept(kind, body, type) and (type == "DELETED" or not only_deletion)
    if news and pool and await RUNNING.queue.may_select(namespace, pool):  # another shard's pool costs nothing
        await RUNNING.queue.reconcile(namespace, pool, "child")


@kopf.on.delete(GROUP, VERSION, PLURAL, labels=MINE)
async def pool_deleted(body: kopf.Body, **_: Any) -> None:
    await RUNNING.queue.finalize(body)
