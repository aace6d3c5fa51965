"""Every kopf registration, and nothing else: each handler delegates to `reconcile`.

A pool is reconciled when it changes, when one of its children (StatefulSet, Job, Pod) changes, and every
`resync_seconds`; reconciles of one pool never overlap. Errors in a reconcile are logged and retried on the
next trigger, never in a hot loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import socket
import time
from collections.abc import Mapping
from typing import Any

import kopf
from kubernetes import client, config

from fireflow_contract import logformat, telemetry
from fireflow_operator import conditions, metrics, names
from fireflow_operator.finalizer import finalize, report_waiting
from fireflow_operator.kube import Kube
from fireflow_operator.model import GROUP, PLURAL, VERSION
from fireflow_operator.pool_index import PoolIndex
from fireflow_operator.pool_metrics import PoolSeries
from fireflow_operator.reconcile import Reconciler
from fireflow_operator.settings import OperatorSettings, load_settings

log = logging.getLogger("fireflow.operator")
_locks: dict[tuple[str, str], asyncio.Lock] = {}
_requeues: dict[tuple[str, str], asyncio.TimerHandle] = {}
_phases: dict[tuple[str, str], str] = {}


class DigestDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """kopf's record of the last handled pool as a digest: kopf keeps the whole spec in an annotation
    otherwise, and a large spec (a long env value) would break every patch of the 256 KiB annotation limit.
    The update handler takes no field diff, so a digest says all it needs: something changed."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> Any:
        essence = super().build(body=body, extra_fields=extra_fields)
        return {"digest": hashlib.sha256(json.dumps(essence, sort_keys=True, default=str).encode()).hexdigest()}


class _State:
    kube: Kube
    pool_index: PoolIndex
    settings: OperatorSettings
    reconciler: Reconciler


STATE = _State()
_pool_series = PoolSeries()


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    STATE.settings = load_settings()
    logging.getLogger().setLevel(STATE.settings.log_level)
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    STATE.kube = Kube.from_client(client.ApiClient())
    STATE.pool_index = STATE.kube.pool_index = PoolIndex()
    STATE.reconciler = Reconciler(STATE.kube, STATE.settings)
    # Our finalizer's name says what it guards; kopf keeps its own bookkeeping out of status.
    settings.persistence.finalizer = names.FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="fireflow.persistent.ai")
    settings.persistence.diffbase_storage = DigestDiffBaseStorage(prefix="fireflow.persistent.ai")
    settings.posting.level = logging.INFO
    # Events say who wrote them: the operator (and which replica), not the framework inside it.
    settings.posting.reporting_component = names.MANAGER
    settings.posting.reporting_instance = os.environ.get("POD_NAME") or socket.gethostname()
    # Watching only some namespaces: no cluster-wide namespace/CRD scans, so no ClusterRole is needed.
    settings.scanning.disabled = bool(STATE.settings.namespaces)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)  # one line per liveness probe otherwise
    # Kopf's default 60 s watch re-lists are cheap reads; a server-side timeout keeps idle watches healthy.
    settings.watching.server_timeout = 300
    if STATE.settings.metrics_port:
        from prometheus_client import start_http_server  # noqa: PLC0415

        start_http_server(STATE.settings.metrics_port, addr=STATE.settings.metrics_host, registry=metrics.REGISTRY)


async def _reconcile(namespace: str, name: str) -> None:
    logformat.enter_pool(namespace, name)  # this line and kopf's about the handler name the pool
    with telemetry.span("reconcile", {"k8s.namespace.name": namespace, "fireflow.pool": name}):
        await _reconcile_pool(namespace, name)


async def _reconcile_pool(namespace: str, name: str) -> None:
    key = (namespace, name)
    lock = _locks.setdefault(key, asyncio.Lock())
    async with lock:
        started = time.monotonic()
        try:
            fetched: Any = await asyncio.to_thread(
                STATE.kube.custom.get_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name
            )
        except client.ApiException as err:
            if err.status == 404:
                _locks.pop(key, None)
                _phases.pop(key, None)
                with contextlib.suppress(KeyError):  # a deleted pool leaves no stale series behind
                    metrics.BUDGET_ALLOWED.remove(namespace, name)
                _pool_series.forget(namespace, name)
                return
            raise
        body: dict[str, Any] = fetched
        if body["metadata"].get("deletionTimestamp"):
            return
        try:
            outcome = await asyncio.to_thread(STATE.reconciler.reconcile, body)
        except Exception as err:
            if isinstance(err, client.ApiException) and err.status == 403 and "being terminated" in str(err.body):
                return  # the namespace is going: only the finalizer has work left, and it runs on its own
            metrics.RECONCILES.labels("error").inc()
            telemetry.record_failure(err)
            log.exception("reconcile of %s/%s failed; retrying in %s s", namespace, name, STATE.settings.resync_seconds)
            _requeue(namespace, name, STATE.settings.resync_seconds)
            return
        finally:
            metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)
        metrics.RECONCILES.labels("ok").inc()
        _phases[key] = outcome.phase
        for phase in ("Pending", "Migrating", "Running", "Degraded"):
            metrics.POOLS.labels(phase).set(sum(1 for p in _phases.values() if p == phase))
        metrics.RECOVERED_RUNS.inc(outcome.recovered_runs)
        if outcome.allowed_replicas is not None:
            metrics.BUDGET_ALLOWED.labels(namespace, name).set(outcome.allowed_replicas)
        _pool_series.update(namespace, name, outcome.status)
        for kind, reason, message in outcome.events:
            kopf.event(kopf.Body(body), type=kind, reason=reason, message=message)  # type: ignore[arg-type]
        if outcome.requeue_seconds is not None:
            _requeue(namespace, name, outcome.requeue_seconds)


def _requeue(namespace: str, name: str, delay: float) -> None:
    key = (namespace, name)
    pending = _requeues.get(key)
    if pending is not None and not pending.cancelled() and pending.when() <= asyncio.get_running_loop().time() + delay:
        return
    if pending is not None:
        pending.cancel()
    loop = asyncio.get_running_loop()
    _requeues[key] = loop.call_later(delay, lambda: asyncio.ensure_future(_reconcile(namespace, name)))


@kopf.on.event(GROUP, VERSION, PLURAL)
async def pool_seen(body: kopf.Body, type: str | None, **_: Any) -> None:
    # Every pool's latest version, for the budget's view of the fleet (pool_index.py); cheap, never blocks.
    STATE.pool_index.observe(dict(body), deleted=type == "DELETED")


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
async def pool_changed(namespace: str | None, name: str, **_: Any) -> None:
    await _reconcile(str(namespace), name)


# Read at import: `main` validated the settings before importing this module.
@kopf.timer(GROUP, VERSION, PLURAL, interval=load_settings().resync_seconds, initial_delay=5.0)
async def pool_resync(namespace: str | None, name: str, **_: Any) -> None:
    await _reconcile(str(namespace), name)


@kopf.on.event("apps", "v1", "statefulsets", labels={names.LABEL_MANAGED_BY: names.MANAGER})
@kopf.on.event("batch", "v1", "jobs", labels={names.LABEL_MANAGED_BY: names.MANAGER})
@kopf.on.event("", "v1", "pods", labels={names.LABEL_MANAGED_BY: names.MANAGER})
async def child_changed(namespace: str | None, labels: Mapping[str, str], **_: Any) -> None:
    pool = labels.get(names.LABEL_POOL)
    if pool:
        await _reconcile(str(namespace), pool)


@kopf.on.delete(GROUP, VERSION, PLURAL)
async def pool_deleted(body: kopf.Body, **_: Any) -> None:
    waiting = await asyncio.to_thread(finalize, STATE.kube, STATE.settings, dict(body))
    if waiting is None:
        return
    # Said where users look (the conditions, and an event when that changes), then looked at again.
    changed = await asyncio.to_thread(report_waiting, STATE.kube, dict(body), waiting)
    if waiting.blocked:
        kopf.warn(body, reason=conditions.REASON_RUNS_NOT_RECOVERED, message=waiting.message)
        raise kopf.TemporaryError(waiting.message, delay=30)
    if changed:
        kopf.info(body, reason=conditions.REASON_DELETING, message=waiting.message)
    raise kopf.TemporaryError(waiting.message, delay=waiting.retry_seconds)
